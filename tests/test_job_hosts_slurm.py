"""Under a real Slurm (tests/test_slurm.py's slurmctld and two slurmd): srun's two dlaunch form one job.

Slurm's own ``--kill-on-bad-exit`` ends a step when a task exits non-zero; the hosts' own stop is sooner
and says why: the other node exits 75 naming the rank and host that failed, and both nodes' summaries
carry the same verdict.
"""

import json
import time

from launcher.execute.job.protocol import STOPPED_EXIT
from tests.launching import kill_run, processes_of_run, wait_until
from tests.test_slurm import render_job, slurm  # noqa: F401  (the module's Slurm cluster fixture)


def test_a_failing_rank_on_one_node_stops_the_other_with_the_jobs_verdict(slurm, tmp_path):  # noqa: F811
    job = render_job(tmp_path, "--fail-rank", "3", "--code", "3", "--after", "1", "--sleep", "60")
    started = time.monotonic()
    result, job_id = slurm.sbatch(job, tmp_path)
    try:
        assert time.monotonic() - started < 40
        output = (tmp_path / f"slurm-{job_id}.out").read_text()
        assert "rank 3 on host 127.0.0.3 exited with code 3" in output, output
        run_dir = tmp_path / "runs" / f"slurm-{job_id}"
        summaries = {host: json.loads((run_dir / f"summary.{host}.json").read_text())
                     for host in ("127.0.0.2", "127.0.0.3")}
        assert summaries["127.0.0.3"]["exit_code"] == 3
        assert summaries["127.0.0.2"]["exit_code"] == STOPPED_EXIT, output
        assert summaries["127.0.0.2"]["job"] == summaries["127.0.0.3"]["job"]
        assert summaries["127.0.0.2"]["job"]["root_cause"]["rank"] == 3
        assert wait_until(lambda: not processes_of_run(f"slurm-{job_id}"), timeout=15)
    finally:
        kill_run(f"slurm-{job_id}")
