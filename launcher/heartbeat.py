"""``from launcher import heartbeat``: ``beat(step=N)`` and ``with phase("checkpoint"):``, the public path of
``launcher.checkpoint.heartbeat``.

The heartbeat belongs to the training side (``launcher/checkpoint/``); training scripts keep this shorter
path, which stays.  The same function, so its once-a-second limit is shared by both paths.
"""

from launcher.checkpoint.heartbeat import beat, phase

__all__ = ["beat", "phase"]
