"""``dlaunch check-network``: the seeds' hccn_tool steps, automated on every host before a job books the cluster.

``host.hccn`` finds and runs the driver's ``hccn_tool`` (bounded in time and output) and reads its answers;
``device`` checks one device (address, link, TLS switch, net health towards its peer); ``host`` checks this
host's devices of a rank table at once; ``remote`` does that on every server over SSH (the same settings
and host-key rules as ``cluster --ssh``); ``report`` turns the results into the table, the JSON, the fixes
and the exit code.
"""
