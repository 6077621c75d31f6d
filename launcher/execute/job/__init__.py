"""The hosts of one job talking over the job's own master address: fail-fast, lost hosts, restarts, hangs.

``protocol`` (the wire, the secret, the exit codes), ``coordinator`` (on the master host), ``member`` (on
every host), ``link`` (what dlaunch's main loop sees), ``restarts`` and ``hosts`` (what one host's launch
asks of the job). docs/multi-host.md is the user's view.
"""
