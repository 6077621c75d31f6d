"""``from launcher import heartbeat; heartbeat.beat()``: the public path of ``launcher.checkpoint.heartbeat``.

The heartbeat belongs to the training side (``launcher/checkpoint/``); training scripts keep this shorter
path, which stays.  The same function, so its once-a-second limit is shared by both paths.
"""

from launcher.checkpoint.heartbeat import beat

__all__ = ["beat"]
