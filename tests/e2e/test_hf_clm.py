"""HF Trainer as a real client: tests/clients/hf_clm/train_clm.py (transformers' run_clm.py options and resume)
on 2 gloo CPU ranks under ``dlaunch run``, a 2-layer GPT-2 built from ``--config_overrides``, a tokenizer and
text written offline by prepare.py. Rank 1 SIGKILLed once a checkpoint-N is saved: dlaunch restarts both ranks,
the Trainer resumes from the last checkpoint-N in ``--output_dir`` (its own resume, nothing told by dlaunch),
and the job ends at the last step with the loss of the same job run without the fault, bit for bit.
The client runs under bench_stamps.py (unchanged: a Trainer callback writes which process logged which step),
the way benchmarks/bench_goodput.py runs it."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.launching import ROOT, run_dlaunch, start_dlaunch, wait_until

CLIENT = ROOT / "tests" / "clients" / "hf_clm"
STEPS, SAVE_EVERY = 200, 20
OVERRIDES = "n_layer=2,n_head=2,n_embd=64,n_positions=64,vocab_size=512,resid_pdrop=0,embd_pdrop=0,attn_pdrop=0"


def client_args(data: Path, out: Path) -> list:
    return [CLIENT / "train_clm.py", "--model_type", "gpt2", "--config_overrides", OVERRIDES,
            "--tokenizer_name", data / "tokenizer", "--train_file", data / "train.txt", "--block_size", "64",
            "--output_dir", out, "--do_train", "--max_steps", STEPS, "--save_steps", SAVE_EVERY,
            "--save_total_limit", "2", "--use_cpu", "--ddp_backend", "gloo", "--report_to", "none",
            "--per_device_train_batch_size", "8", "--learning_rate", "1e-3", "--logging_steps", "1",
            "--disable_tqdm", "true", "--seed", "46"]


def env_for(tmp_path: Path, stamps: Path) -> dict:
    stamps.mkdir()
    return {"HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1", "HF_CLM_BENCH_DIR": str(stamps)}


def processes(stamps: Path) -> list[dict]:
    """Each rank process's stamps, in start order: rank, pid, and the steps rank 0 logged (step -> loss)."""
    found = []
    for path in stamps.glob("rank*-*.log"):
        rank, pid = (int(x) for x in path.stem[4:].split("-"))
        lines = [line.split() for line in path.read_text().splitlines()]
        start = next(float(p[1]) for p in lines if p[0] == "start")
        steps = {int(p[1]): float(p[3]) for p in lines if p[0] == "iter" and len(p) == 4}
        found.append({"rank": rank, "pid": pid, "start": start, "steps": steps})
    return sorted(found, key=lambda p: p["start"])


def test_hf_trainer_resumes_from_its_last_checkpoint_after_a_rank_is_killed(tmp_path):
    data = tmp_path / "data"
    subprocess.run([sys.executable, CLIENT / "prepare.py", data], check=True, timeout=60)

    free = run_dlaunch("run", CLIENT / "bench_stamps.py", "--ranks", "2", "--output-dir", tmp_path / "runs_free",
                       "--", *client_args(data, tmp_path / "out_free"), cwd=tmp_path, timeout=300,
                       env=env_for(tmp_path, tmp_path / "stamps_free"))
    assert free.returncode == 0, free.stdout[-3000:] + free.stderr[-3000:]
    free_steps = next(p for p in processes(tmp_path / "stamps_free") if p["rank"] == 0)["steps"]
    assert sorted(free_steps) == list(range(1, STEPS + 1))

    stamps, out = tmp_path / "stamps", tmp_path / "out"
    job = start_dlaunch("run", CLIENT / "bench_stamps.py", "--ranks", "2", "--max-restarts", "1", "--output-dir",
                        tmp_path / "runs", "--", *client_args(data, out), cwd=tmp_path,
                        env=env_for(tmp_path, stamps))
    try:
        # the second checkpoint complete (trainer_state.json is its last file): the kill lands between saves
        saved = wait_until(lambda: (out / f"checkpoint-{2 * SAVE_EVERY}" / "trainer_state.json").exists(),
                           timeout=240, interval=0.02)
        assert saved, "no checkpoint-40 within 240 s"
        victim = next(p for p in processes(stamps) if p["rank"] == 1)
        os.kill(victim["pid"], signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 0, stdout[-3000:] + stderr[-3000:]

    first, second = [p for p in processes(stamps) if p["rank"] == 0]
    killed_at = max(first["steps"])
    assert killed_at < STEPS, "the job ended before the kill"
    resumed = min(second["steps"])
    # resumed right after the last complete checkpoint-N before the kill: none of the saved steps trained again
    last_saved = killed_at // SAVE_EVERY * SAVE_EVERY
    assert resumed in (last_saved + 1, last_saved - SAVE_EVERY + 1), (killed_at, resumed)
    assert resumed > 2 * SAVE_EVERY
    assert max(second["steps"]) == STEPS
    # every step trained after the resume has the loss of the run without the fault, bit for bit
    assert second["steps"] == {step: free_steps[step] for step in second["steps"]}
