"""dlaunch: a distributed-training launcher for Ascend NPUs and GPUs.

Kept import-free on purpose: ``dlaunch --help`` must start in milliseconds, so
nothing heavy (paramiko, jinja2, torch) is imported until a command needs it.
"""

__version__ = "0.1.0"
