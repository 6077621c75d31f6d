"""The kernel's floor under a launch of N ranks: a bare Python loop making what dlaunch's directory contract
makes for every rank, and nothing else (no plan, no logs' content, no bookkeeping).

Per rank: its rank directory and checkpoint directory (two mkdir), env.log (created, 4 KiB written: the size
of a 1,024-rank env.log on one host), output.log (created, held as the rank's stdout), one ``posix_spawn`` of
``setpriv --pdeathsig KILL -- /bin/true`` in its own session; then every rank waited for.  bench_scale runs
it beside dlaunch, measured by the same harness: the launcher's CPU per rank above this floor is what
dlaunch's own Python costs; the floor itself is the kernel's (inodes, one clone and exec per rank).

Run:  python benchmarks/scale_floor.py N DIR
"""

from __future__ import annotations

import os
import shutil
import sys


def main() -> int:
    ranks, root = int(sys.argv[1]), sys.argv[2]
    setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
    wrapper = [setpriv, "--pdeathsig", "KILL", "--", "/bin/true"]
    env_text = b"X" * 4095 + b"\n"
    env = {k.encode(): v.encode() for k, v in os.environ.items()}
    os.mkdir(root)
    pids = []
    for rank in range(ranks):
        rank_dir = os.path.join(root, f"rank_{rank}")
        os.mkdir(rank_dir)
        os.mkdir(os.path.join(rank_dir, "checkpoints"))
        fd = os.open(os.path.join(rank_dir, "env.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.write(fd, env_text)
        os.close(fd)
        out = os.open(os.path.join(rank_dir, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        pids.append(os.posix_spawn(setpriv, wrapper, env, setsid=True,
                                   file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                                 (os.POSIX_SPAWN_DUP2, out, 1), (os.POSIX_SPAWN_DUP2, out, 2)]))
        os.close(out)
    failed = sum(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0 for pid in pids)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
