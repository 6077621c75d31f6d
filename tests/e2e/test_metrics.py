"""--metrics-port with a real Prometheus server (Debian's ``prometheus``, scripts/test.sh installs it): it scrapes a
running job every second on loopback, and what its HTTP API answers, and what ``dlaunch status --json`` shows,
agree with what the job did."""

import json
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request

import pytest

from launcher.execute.local.metrics import status_class
from tests.launching import (
    ROOT,
    free_port,
    kill_run,
    latest_run,
    run_dlaunch,
    start_dlaunch,
    wait_until,
    write_rank_table,
)

METRICS_RANK = ROOT / "tests/programs/metrics_rank.py"
STEPS = 20


def samples(text: str) -> dict[str, float]:
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def scrape(port: int, address: str = "127.0.0.1") -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://{address}:{port}/metrics", timeout=5) as answer:
            return samples(answer.read().decode())
    except OSError:
        return {}


def query(port: int, expression: str) -> list[dict]:
    """Prometheus's answer to an instant query: [{"metric": {...}, "value": [time, "text"]}, ...]."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expression})
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.loads(answer.read())
    except OSError:
        return []
    assert body["status"] == "success", body
    return body["data"]["result"]


def value(port: int, expression: str) -> float | None:
    found = query(port, expression)
    return float(found[0]["value"][1]) if len(found) == 1 else None


@pytest.fixture
def prometheus(tmp_path):
    """Start Prometheus on loopback, its storage in tmp: a function of the target's port, returning its own."""
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    if not shutil.which(binary):
        pytest.skip("Debian's prometheus is not installed (scripts/test.sh installs it)")
    started = []

    def start(*targets: str) -> int:
        port = free_port("127.0.0.1", span=1)
        config = tmp_path / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                          "scrape_configs:\n  - job_name: dlaunch\n    static_configs:\n"
                          f"      - targets: {list(targets)}\n")
        log = open(tmp_path / "prometheus.log", "w")
        started.append(subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log))
        return port

    yield start
    for proc in started:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_prometheus_scrapes_a_running_job_and_status_agrees(tmp_path, prometheus):
    """3 ranks, rank 2 1.4x slower, rank 1 failing once (exit 3, one job restart): Prometheus, scraping every
    second, reads the restart and its reason, the two survivors told, the ranks running again, their last step,
    rank 2's score, the checkpoint every rank saved; a scrape and ``status --json`` agree on the ranks' states
    and steps."""
    port, stop = free_port("127.0.0.1", span=1), tmp_path / "stop"
    out = tmp_path / "runs"
    job = start_dlaunch("run", "--ranks", "3", "--output-dir", out, "--run-id", "metrics", "--metrics-port", port,
                        "--max-restarts", "1", "--hang-timeout", "300", "--survivor-window", "5", METRICS_RANK,
                        "--", "--steps", STEPS, "--fail-rank", "1", "--stop-file", stop, cwd=tmp_path)
    try:
        api = prometheus(f"127.0.0.1:{port}")
        settled = wait_until(lambda: value(api, 'dlaunch_ranks{state="running"}') == 3
                             and value(api, "dlaunch_attempt") == 1
                             and len(query(api, f"dlaunch_rank_last_step == {STEPS}")) == 3
                             and value(api, "dlaunch_checkpoint_step") == STEPS
                             and len(query(api, "dlaunch_rank_straggler_relative")) == 3, timeout=90, interval=0.5)
        assert settled, (scrape(port), (tmp_path / "prometheus.log").read_text()[-2000:])
        assert value(api, 'dlaunch_restarts_total{policy="job",reason="error"}') == 1
        assert value(api, "dlaunch_attempts_total") == 2
        assert value(api, "dlaunch_fault_recovery_seconds") > 0
        assert value(api, 'dlaunch_ranks{state="failed"}') == 0
        assert abs(value(api, 'dlaunch_rank_straggler_relative{rank="2"}') - 1 / 1.4) < 0.02
        assert [row["metric"]["rank"] for row in query(api, "dlaunch_rank_straggler_relative < 0.75")] == ["2"]
        assert value(api, "dlaunch_checkpoint_age_seconds") >= 0
        assert value(api, "dlaunch_hang_timeout_seconds") == 300
        assert value(api, "dlaunch_survivor_notices_total") == 2   # ranks 0 and 2, when rank 1 failed
        host = query(api, "dlaunch_ranks")[0]["metric"]["host"]
        dashboard = json.loads((ROOT / "configs/grafana/dlaunch.json").read_text())
        unanswered = set()
        for panel in dashboard["panels"]:   # every query of the Grafana dashboard, as Grafana would send it
            for target in panel["targets"]:
                expression = target["expr"].replace("$job", ".*").replace("$host", ".*")
                if not query(api, expression.replace("$__rate_interval", "1m")):
                    unanswered.update(re.findall(r"dlaunch_[a-z_]+", expression))
        assert unanswered == {"dlaunch_spares_standing_by", "dlaunch_hosts_replaced_total"}, unanswered   # no spares

        def agree():
            snap = json.loads(run_dlaunch("status", "--json", latest_run(out), cwd=tmp_path, timeout=30).stdout)
            got = scrape(port)
            counts: dict[str, int] = {}
            for row in snap["ranks"]:
                counts[status_class(row["state"])] = counts.get(status_class(row["state"]), 0) + 1
            states = {state: int(got.get(f'dlaunch_ranks{{host="{host}",state="{state}"}}', 0)) for state in counts}
            rows = {row["rank"]: row for row in snap["steps"]["ranks"]}
            steps = all(got.get(f'dlaunch_rank_last_step{{rank="{r}",host="{host}"}}') == row["last_step"]
                        and got.get(f'dlaunch_rank_straggler_relative{{rank="{r}",host="{host}"}}') == row["relative"]
                        and got.get(f'dlaunch_rank_step_seconds{{rank="{r}",host="{host}"}}') == row["median_ms"] / 1000
                        for r, row in rows.items())
            attempt = {row["attempt"] for row in snap["ranks"]} == {got.get(f'dlaunch_attempt{{host="{host}"}}')}
            return (states == counts and steps and attempt and len(rows) == 3, snap, got)

        result = wait_until(lambda: agree()[0], timeout=30, interval=1.0)
        assert result, agree()[1:]
        stop.write_text("")
        assert job.wait(timeout=60) == 0, job.stderr.read()
    finally:
        if job.poll() is None:
            kill_run("metrics")
            job.kill()
            job.wait()


def test_each_host_of_a_cluster_serves_its_ranks_on_its_own_address(tmp_path, prometheus):
    """Two hosts of one job (dlaunch cluster on 127.0.0.2 and 127.0.0.3, one --metrics-port): each serves its own
    ranks on its own address, labelled with its server_id; Prometheus, scraping both, sums the job."""
    table = write_rank_table(tmp_path / "rt.json", ("127.0.0.2", "127.0.0.3"), 2)
    port, master, stop = free_port("127.0.0.2", span=1), free_port("127.0.0.2"), tmp_path / "stop"
    hosts = [start_dlaunch("cluster", METRICS_RANK, "--rank-table", table, "--rank-start", start, "--run-id", "two",
                           "--master-port", master, "--profile", "structure", "--output-dir", tmp_path / "shared",
                           "--metrics-port", port, "--", "--steps", STEPS, "--stop-file", stop, cwd=tmp_path)
             for start in (0, 2)]
    try:
        api = prometheus(f"127.0.0.2:{port}", f"127.0.0.3:{port}")
        settled = wait_until(lambda: value(api, 'sum(dlaunch_ranks{state="running"})') == 4
                             and len(query(api, f"dlaunch_rank_last_step == {STEPS}")) == 4
                             and value(api, "min(dlaunch_checkpoint_step)") == STEPS, timeout=90, interval=0.5)
        assert settled, (scrape(port, "127.0.0.2"), scrape(port, "127.0.0.3"))
        ranks = {(row["metric"]["host"], row["metric"]["rank"]) for row in query(api, "dlaunch_rank_last_step")}
        assert ranks == {("127.0.0.2", "0"), ("127.0.0.2", "1"), ("127.0.0.3", "2"), ("127.0.0.3", "3")}
        assert {row["metric"]["instance"]: row["metric"]["host"] for row in query(api, "dlaunch_attempt")} == \
            {f"127.0.0.2:{port}": "127.0.0.2", f"127.0.0.3:{port}": "127.0.0.3"}
        assert scrape(port, "127.0.0.1") == {}   # bound on each host's own address, not on every address
        stop.write_text("")
        assert [host.wait(timeout=60) for host in hosts] == [0, 0], [host.stderr.read() for host in hosts]
    finally:
        if any(host.poll() is None for host in hosts):
            kill_run("two")
            for host in hosts:
                host.kill()
                host.wait()


def test_the_launch_path_imports_no_metrics_without_the_flag():
    code = ("import sys, launcher.cli.run, launcher.execute.attempts, launcher.execute.local.watches; "
            "print(sorted(m for m in ('http.server', 'socketserver', 'launcher.execute.local.metrics', "
            "'launcher.base.exposition') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
