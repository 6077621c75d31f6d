"""``dlaunch cluster --ssh``: the head (plan, preflight, session) and the agent on each host."""
