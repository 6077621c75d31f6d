"""``dlaunch cluster --ssh``: the head (plan, preflight, session, outcome) and the wire to each host (protocol)."""
