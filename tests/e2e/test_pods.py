"""dlaunch inside the pods of a Kubernetes job: Kubeflow, Volcano and Ascend's operator (launcher/host/pods.py).

No API server is needed: a "pod" is a dlaunch process with exactly the variables (and rank table) its
operator gives a pod, taken from the operator's source (tests/data/operators.json cites each), on its own
loopback address.  Real gloo ranks all-reduce across pods; the Kubeflow case runs beside real torchrun under
the same variables.  The operator's rank-table mount is a temporary path (DLAUNCH_ASCEND_RANK_TABLE_DEFAULT).
"""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from launcher.contract import ExitCode
from launcher.errors import UsageError
from launcher.host.pods import detect
from launcher.table.model import loads
from launcher.table.share import master_address, select_server
from tests.launching import RANK_PROGRAM, ROOT, dlaunch_argv, free_port, side_by_side

OPERATORS = json.loads((Path(__file__).parents[1] / "data" / "operators.json").read_text())
DUMP = str(ROOT / "tests" / "programs" / "dump_env.py")
PODS = ("127.0.0.2", "127.0.0.3")
# what a pod of these tests must not inherit from the machine running them
UNSET = ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "RANK_TABLE_FILE", "MASTER_ADDR",
         "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def pod_env(operator: str, index: int, **values) -> dict:
    """The variables ``operator`` gives pod ``index``, with the test's values filled in."""
    fill = {"index": index, "job": "job-uid-1", "node_ip": "127.0.0.9", "ms_role": "MS_WORKER", **values}
    return {name: value.format(**fill) for name, value in OPERATORS[operator]["env"].items()}


def clean_env(extra: dict) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in UNSET and not k.startswith(("PET_", "DLAUNCH_"))}
    return {**base, "PYTHONPATH": str(ROOT), **extra}


def test_each_operators_variables_say_the_pods_place_in_the_job():
    master = {"master": "job-master-0.job", "port": "23456", "nnodes": "4", "nproc": "2", "world": "8",
              "local_list": "0,1"}
    for operator, expected in (("kubeflow_trainer", ("job-master-0.job", 23456, 4, 3, "2")),
                               ("kubeflow_pytorchjob", ("job-master-0.job", 23456, 4, 3, "2")),
                               ("volcano_pytorch", ("job-master-0.job", 23456, 4, 3, None)),
                               ("ascendjob_pytorch", ("job-master-0.job", 23456, 4, 3, "2")),
                               ("ascendjob_mindspore", ("job-master-0.job", 23456, 4, 3, "2"))):
        pod = detect(pod_env(operator, 3, **master))
        assert pod is not None, operator
        assert (pod.master_addr, pod.master_port, pod.nnodes, pod.node_rank, pod.nproc) == expected, operator
    # a rank of dlaunch or torchrun has RANK and WORLD_SIZE of its own: never a pod's
    inside = {**pod_env("volcano_pytorch", 1, **master), "DLAUNCH_RANK_DIR": "/tmp/x"}
    assert detect(inside) is None
    assert detect({**pod_env("volcano_pytorch", 1, **master), "TORCHELASTIC_RUN_ID": "x"}) is None
    assert detect({"PATH": "/bin"}) is None


def test_an_elastic_or_malformed_job_size_is_one_line():
    with pytest.raises(UsageError, match="elastic"):
        detect({"PET_NNODES": "1:4", "PET_NODE_RANK": "0"})
    with pytest.raises(UsageError, match=r"WORLD_SIZE='two'"):
        detect({"MASTER_ADDR": "m", "WORLD_SIZE": "two", "RANK": "0", "VC_TASK_INDEX": "0"})


def test_a_pod_finds_its_server_by_container_ip_when_pods_share_a_node():
    """ascend-operator's table: two pods on one node share server_id and host_ip; container_ip tells them apart."""
    servers = [{"server_id": "10.0.0.9", "host_ip": "10.0.0.9", "container_ip": f"172.16.0.{10 + s}",
                "device": [{"device_id": str(4 * s + d), "device_ip": f"192.0.2.{8 * s + d}",
                            "rank_id": str(4 * s + d)} for d in range(4)]} for s in range(2)]
    table = loads(json.dumps({"version": "1.0", "server_count": "2", "server_list": servers,
                              "status": "completed"}))
    assert select_server(table, environ={"POD_IP": "172.16.0.11"}, host_names=lambda: {"10.0.0.9"}) == 1
    assert select_server(table, environ={}, host_names=lambda: {"172.16.0.10", "10.0.0.9"}) == 0
    # no address matches: the pod's index the operator gave
    assert select_server(table, environ={"MS_SCHED_HOST": "m", "MS_NODE_RANK": "1"}, host_names=set) == 1
    # MASTER_ADDR by default: rank 0's pod, not its node (unreachable on a pod network)
    assert master_address(table) == "172.16.0.10"


def _pods(command, operator, tmp_path, program_args=(), per_pod=None, **values):
    """Start one dlaunch per pod of a two-pod job, side by side: {index: (returncode, stderr, directory)}.
    Each pod's stderr is also in ``pod{index}/dlaunch.stderr`` while it runs (a test may wait for a line)."""
    def one(index):
        cwd = tmp_path / f"pod{index}"
        cwd.mkdir(exist_ok=True)
        env = clean_env({**pod_env(operator, index, **values), "POD_IP": PODS[index], **(per_pod or {})})
        with open(cwd / "dlaunch.stderr", "w") as err:
            done = subprocess.run(command(index), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                  timeout=180)
        return done.returncode, (cwd / "dlaunch.stderr").read_text(), cwd
    return side_by_side(one, 0, 1)


ALLREDUCE = """
import json, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
tensor = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(tensor)
with open(f"allreduce_{os.environ['RANK']}.json", "w") as fh:
    json.dump({"sum": tensor.item(), "world": dist.get_world_size(), "group_rank": os.environ["GROUP_RANK"]}, fh)
dist.destroy_process_group()
"""


def test_kubeflow_pods_run_as_under_torchrun(tmp_path):
    """A TrainJob's two pods, each with the Trainer's PET_* variables: real torchrun and dlaunch torchrun (no
    flag at all) give the same all-reduce over the same two pods; dlaunch cluster plans the same ranks."""
    script = tmp_path / "allreduce.py"
    script.write_text(ALLREDUCE)
    outcomes = {}
    for name, command in (
            ("torchrun", lambda i: [sys.executable, "-m", "torch.distributed.run", script]),
            ("dlaunch torchrun", lambda i: dlaunch_argv("torchrun", script))):
        root = tmp_path / name.replace(" ", "_")
        root.mkdir()
        port = free_port("127.0.0.2")
        results = _pods(command, "kubeflow_trainer", root, master="127.0.0.2", port=str(port), nnodes="2",
                        nproc="1")
        for index, (code, err, _) in results.items():
            assert code == 0, f"{name}, pod {index}: {err}"
        outcomes[name] = [json.loads((root / f"pod{rank}" / f"allreduce_{rank}.json").read_text())
                          for rank in range(2)]
    assert outcomes["torchrun"] == [{"sum": 3.0, "world": 2, "group_rank": str(r)} for r in range(2)]
    assert outcomes["dlaunch torchrun"] == outcomes["torchrun"]
    plan = subprocess.run(dlaunch_argv("cluster", script, "--dry-run"), cwd=tmp_path, capture_output=True, text=True,
                          env=clean_env(pod_env("kubeflow_trainer", 1, master="127.0.0.2", port="29400", nnodes="2",
                                                nproc="1")), timeout=60)
    assert plan.returncode == 0, plan.stderr
    for line in ("RANK=1", "WORLD_SIZE=2", "GROUP_RANK=1", "MASTER_ADDR=127.0.0.2", "MASTER_PORT=29400"):
        assert f"    {line}\n" in plan.stdout, line


def test_volcano_pods_need_no_flag(tmp_path):
    """Volcano's pytorch plugin gives only MASTER_ADDR/PORT, WORLD_SIZE (pods) and RANK (the pod's index)."""
    port = free_port("127.0.0.2")
    results = _pods(lambda i: dlaunch_argv("cluster", DUMP), "volcano_pytorch", tmp_path, master="127.0.0.2",
                    port=str(port), nnodes="2", per_pod={"CUDA_VISIBLE_DEVICES": "0,1"})
    for index, (code, err, _) in results.items():
        assert code == 0, f"pod {index}: {err}"
    envs = {rank: json.loads((tmp_path / f"pod{rank // 2}" / f"env_{rank}.json").read_text()) for rank in range(4)}
    assert {rank: (e["RANK"], e["WORLD_SIZE"], e["LOCAL_RANK"], e["MASTER_ADDR"], e["MASTER_PORT"], e["GROUP_RANK"])
            for rank, e in envs.items()} == {
        rank: (str(rank), "4", str(rank % 2), "127.0.0.2", str(port), str(rank // 2)) for rank in range(4)}


def _ascend_table(path: Path, status: str) -> None:
    """ascend-operator's hccl.json for two 8-NPU pods, each on its own node: server_id and host_ip are the node's
    address (which a pod does not have), container_ip the pod's."""
    servers = [{"server_id": f"127.0.0.{8 + s}", "host_ip": f"127.0.0.{8 + s}", "container_ip": PODS[s],
                "device": [{"device_id": str(d), "device_ip": f"192.0.{s + 2}.{d + 10}", "rank_id": str(8 * s + d)}
                           for d in range(8)]} for s in range(2)]
    text = json.dumps({"status": status, "server_list": servers if status == "completed" else [],
                       "server_count": str(len(servers)) if status == "completed" else "0", "version": "1.0"})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def test_ascendjob_pods_wait_for_the_table_and_find_their_server_by_pod_ip(tmp_path):
    """AscendJob (PyTorch): the table says "initializing" until the operator placed every pod; each pod then
    finds its server by container_ip (its POD_IP; server_id is the node's), takes the operator's MASTER_ADDR (the
    master pod's address, not a server_id) and never hands its LOCAL_RANK list to a rank."""
    table = tmp_path / "hccl.json"
    _ascend_table(table, "initializing")
    port = free_port("127.0.0.2")
    # the operator completes the table once both pods said they wait for it (a timer raced a slow pod's start: a
    # pod that first read the table after it flipped never waited); after 60 s it completes it anyway, so a pod
    # that never says so fails the test below instead of hanging it
    waiting = [tmp_path / f"pod{index}" / "dlaunch.stderr" for index in (0, 1)]
    said, stop = [], threading.Event()

    def operator():
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            if all(path.exists() and "(status: initializing)" in path.read_text() for path in waiting):
                said.append(True)
                break
            stop.wait(0.05)
        _ascend_table(table, "completed")

    flip = threading.Thread(target=operator, daemon=True)
    flip.start()
    try:
        results = _pods(lambda i: dlaunch_argv("cluster", DUMP), "ascendjob_pytorch", tmp_path, master="127.0.0.2",
                        port=str(port), nproc="8", world="16", local_list="0,1,2,3,4,5,6,7",
                        per_pod={"DLAUNCH_ASCEND_RANK_TABLE_DEFAULT": str(table)})
    finally:
        stop.set()
        flip.join(timeout=10)
    for index, (code, err, _) in results.items():
        assert code == 0, f"pod {index}: {err}"
        assert "AscendJob" in err and "to be completed by the job's operator (status: initializing)" in err, err
    assert said, "the table was completed only after 60 s: a pod never said it waited for it"
    for rank in range(16):
        env = json.loads((tmp_path / f"pod{rank // 8}" / f"env_{rank}.json").read_text())
        assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"], env["DEVICE_ID"]) == (
            str(rank), str(rank % 8), "16", "127.0.0.2", str(rank % 8))
        # the ranks read the completed table (dlaunch's copy in the run directory), never the initializing one
        assert json.loads(Path(env["RANK_TABLE_FILE"]).read_text())["status"] == "completed"


SCHEDULER = """
import json, os, sys
with open("env_scheduler.json", "w") as fh:
    json.dump(dict(os.environ), fh)
print("scheduler serving the cluster")
sys.exit(int(sys.argv[1]))
"""


def test_mindspores_scheduler_pod_runs_the_script_once_as_the_scheduler_not_as_rank_0(tmp_path):
    """AscendJob (MindSpore) gives its scheduler a pod of its own (MS_ROLE=MS_SCHED, no devices): dlaunch cluster
    runs the script there once as MindSpore's scheduler, as ``--ms-scheduler``'s, with the operator's MS_*: no
    rank, no device, no rank table, its files in ``scheduler/`` (no ``rank_000``), "the MindSpore scheduler exited
    0" and a ``sched`` row in ``status``; its exit code is the pod's."""
    script = tmp_path / "sched.py"
    script.write_text(SCHEDULER)
    env = clean_env(pod_env("ascendjob_mindspore", 0, master="127.0.0.2", port="8118", nproc="8", world="16",
                            ms_role="MS_SCHED"))
    outcomes = {}
    for code in (0, 3):
        cwd = tmp_path / f"exit{code}"
        cwd.mkdir()
        outcomes[code] = subprocess.run(dlaunch_argv("cluster", script, "--", code), cwd=cwd, env=env,
                                        capture_output=True, text=True, timeout=60)
    done = outcomes[0]
    assert done.returncode == 0, done.stderr
    assert "this pod is the job's MindSpore scheduler" in done.stderr and "Traceback" not in done.stderr
    assert "dlaunch: the MindSpore scheduler exited 0 in " in done.stderr and "rank(s)" not in done.stderr
    assert "[scheduler]: scheduler serving the cluster" in done.stdout + done.stderr   # the pod's log shows it
    run = next((tmp_path / "exit0" / "dlaunch_runs").glob("ascendjob-*"))
    assert not list(run.glob("rank_[0-9]*")) and (run / "scheduler" / "output.log").is_file()
    dumped = json.loads((tmp_path / "exit0" / "env_scheduler.json").read_text())
    assert (dumped["MS_ROLE"], dumped["MS_SCHED_HOST"], dumped["MS_SCHED_PORT"], dumped["MS_WORKER_NUM"],
            dumped["DLAUNCH_RANK_DIR"]) == ("MS_SCHED", "127.0.0.2", "8118", "16", str(run / "scheduler"))
    assert not {"RANK", "DEVICE_ID", "RANK_TABLE_FILE", "LOCAL_RANK"} & set(dumped)
    summary = json.loads(next(run.glob("summary*.json")).read_text())
    assert summary["ranks"] == [] and summary["scheduler"]["exit_code"] == 0
    status = subprocess.run(dlaunch_argv("status", run), cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=60)
    assert status.returncode == 0, status.stderr
    rows = status.stdout.splitlines()
    assert "succeeded, exit code 0; the MindSpore scheduler only" in rows[0], status.stdout
    assert [row.split()[:3] for row in rows[2:]] == [["sched", "scheduler", "-"]], status.stdout
    snap = json.loads(subprocess.run(dlaunch_argv("status", run, "--json"), cwd=tmp_path, env=env,
                                     capture_output=True, text=True, timeout=60).stdout)
    assert [(row["role"], row["state"]) for row in snap["ranks"]] == [("scheduler", "exited 0")]   # no rank row
    failed = outcomes[3]
    assert failed.returncode == 3, failed.stderr
    assert "the MindSpore scheduler (host scheduler) exited with code 3" in failed.stderr, failed.stderr
    assert "rank(s)" not in failed.stderr and "Traceback" not in failed.stderr


def test_dlaunch_torchrun_in_a_volcano_pod_takes_the_job_from_the_pod(tmp_path):
    """Volcano sets no PET_*: torchrun would start a one-node job; dlaunch torchrun takes the pods' size."""
    env = clean_env(pod_env("volcano_pytorch", 1, master="127.0.0.2", port="23456", nnodes="2"))
    done = subprocess.run(dlaunch_argv("torchrun", "--nproc-per-node", "2", "--dry-run", DUMP), cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "--nnodes 2 --node-rank 1 --master-addr 127.0.0.2 --master-port 23456" in done.stderr
    assert "RANK=2" in done.stdout + done.stderr and "WORLD_SIZE=4" in done.stdout + done.stderr



def test_mindspore_worker_pods_register_with_the_operators_scheduler(tmp_path):
    """AscendJob (MindSpore): the ranks get msrun's worker contract with the operator's MS_SCHED_HOST/PORT and no
    scheduler of dlaunch's (the scheduler has its own pod); the pod without POD_IP finds its server by XDL_IP."""
    table = tmp_path / "hccl.json"
    _ascend_table(table, "completed")
    env = clean_env({**pod_env("ascendjob_mindspore", 1, master="127.0.0.5", port="8118", nproc="8", world="16",
                               node_ip="127.0.0.9"), "DLAUNCH_ASCEND_RANK_TABLE_DEFAULT": str(table)})
    done = subprocess.run(dlaunch_argv("cluster", DUMP, "--dry-run"), cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    plan = done.stdout
    assert "server 127.0.0.9 (server 2 of 2)" in plan and "MindSpore scheduler" not in plan
    rank8 = plan[plan.index("rank 8 "):plan.index("rank 9 ") if "rank 9 " in plan else None]
    for line in ("MS_ROLE=MS_WORKER", "MS_NODE_ID=8", "MS_SCHED_HOST=127.0.0.5", "MS_SCHED_PORT=8118",
                 "MS_WORKER_NUM=16", "RANK_ID=8", "DEVICE_ID=0"):
        assert f"    {line}\n" in rank8, line
    assert "RANK_TABLE_FILE=" not in rank8   # it would take MindSpore's init() off the scheduler


def _v2_table(pods=2, per=8, status="completed") -> dict:
    """ascend-operator's version 2.0 layout (pkg/ranktable/v2dot0/ranktable.go): ranks, no servers."""
    ranks = [{"rank_id": p * per + d, "local_id": d, "device_id": d,
              "level_list": [{"net_layer": 0, "net_instance_id": "sp0", "net_type": "TOPO_FILE_DESC",
                              "net_attr": "", "rank_addr_list": []}]} for p in range(pods) for d in range(per)]
    return {"status": status, "server_list": [], "server_count": "", "version": "2.0", "rank_list": ranks,
            "rank_count": len(ranks)}


def test_version_2_0_tables_validate_in_their_own_terms():
    from launcher.table.model import dumps
    from launcher.table.rules import errors, validate

    good = _v2_table()
    table = loads(json.dumps(good))
    assert [len(s.devices) for s in table.servers] == [8, 8] and not errors(validate(table))
    assert json.loads(dumps(table)) == good   # written back as the operator wrote it (the ranks' copy)
    bad = _v2_table()
    bad["rank_list"][10]["rank_id"] = 3
    bad["rank_list"][12]["device_id"] = "x"
    bad["rank_count"] = 15
    found = {(p.rule, p.path) for p in errors(validate(loads(json.dumps(bad))))}
    assert {("S structure", "rank_list[12].device_id"), ("S structure", "rank_count"),
            ("R5 rank-unique", "rank_list[10].rank_id")} <= found
    assert not any("server_list[" in p.path for p in errors(validate(loads(json.dumps(bad)))))
    four = {(p.rule, p.path) for p in errors(validate(loads(json.dumps(_v2_table(per=4)))))}
    assert four == {("R1 device-count", "rank_list[0..3] (pod 0)"), ("R1 device-count", "rank_list[4..7] (pod 1)")}


def test_a_pod_takes_its_share_of_a_2_0_table_by_its_index(tmp_path):
    table = tmp_path / "hccl.json"
    table.write_text(json.dumps(_v2_table()))
    env = clean_env({**pod_env("ascendjob_pytorch", 1, master="127.0.0.2", port="29500", nproc="8", world="16",
                               local_list="0,1,2,3,4,5,6,7"), "RANK_TABLE_FILE": str(table)})
    done = subprocess.run(dlaunch_argv("cluster", DUMP, "--dry-run"), cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "8 rank(s) on server pod1 (server 2 of 2), world size 16" in done.stdout
    assert "    RANK=8\n" in done.stdout and "    MASTER_ADDR=127.0.0.2\n" in done.stdout


def test_a_rank_failing_in_one_pod_stops_the_other_pod(tmp_path):
    """Pods started by their operator, not by a head: a rank exiting 3 in pod 1 stops pod 0 (exit 75, the line
    naming the failing host and rank) and pod 1 exits 3, the job's verdict the same in both summaries."""
    port = free_port("127.0.0.2")
    results = _pods(lambda i: dlaunch_argv("cluster", RANK_PROGRAM, "--grace-period", "2", "--", "--sleep", "60",
                                           "--fail-rank", "1", "--after", "1"),
                    "volcano_pytorch", tmp_path, master="127.0.0.2", port=str(port), nnodes="2",
                    per_pod={"CUDA_VISIBLE_DEVICES": "0"})
    (code0, err0, cwd0), (code1, err1, cwd1) = results[0], results[1]
    assert (code0, code1) == (ExitCode.STOPPED_BY_PEER, 3), err0 + err1
    assert "rank 1" in err0 and "exited with code 3" in err0
    verdicts = [json.loads(next(cwd.glob("dlaunch_runs/*/summary*.json")).read_text())["job"]
                for cwd in (cwd0, cwd1)]
    assert verdicts[0]["root_cause"] == verdicts[1]["root_cause"] and verdicts[0]["exit_code"] == 3


def test_mindspore_worker_pods_with_a_2_0_table_run_unlinked_rather_than_wait_for_a_pod_named_pod0(tmp_path):
    """A version 2.0 table names no pod's address: the worker pods once waited for a coordinator at the name
    dlaunch gives rank 0's pod (pod0) and stopped with 69 after --join-timeout (issue 38, item 20). Each now
    runs its ranks and says why it is not linked to the others."""
    table = tmp_path / "hccl.json"
    table.write_text(json.dumps(_v2_table()))
    results = _pods(lambda i: dlaunch_argv("cluster", "--no-python", "/bin/true", "--join-timeout", "30"),
                    "ascendjob_mindspore", tmp_path, master="127.0.0.5", port="8118", nproc="8", world="16",
                    per_pod={"RANK_TABLE_FILE": str(table)})
    for code, stderr, _ in results.values():
        assert code == 0, stderr
        assert "not linked to the job's other hosts: the job's rank table (version 2.0) names no pod's address" \
            in stderr
        assert "pod0" not in stderr.split("not linked")[0]
