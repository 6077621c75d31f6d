"""Where the fronts (``dlaunch msrun``, ``dlaunch torchrun``) end: their request run by run's or cluster's handler."""

from __future__ import annotations

from launcher.settings.request import LaunchRequest


def launch(request: LaunchRequest) -> int:
    """Run a settled request with its command's handler: where the fronts (msrun, torchrun) end."""
    from launcher.cli.cluster import cmd_cluster
    from launcher.cli.run import cmd_run

    return cmd_run(request) if request.command == "run" else cmd_cluster(request)
