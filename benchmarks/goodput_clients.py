"""The clients bench_goodput.py trains (``--client``): how each is set up once, how its ranks are started, what
its run must reach, and its defaults.  Every client writes the same stamps (``rank{R}-{pid}.log`` lines
``start``, ``imported``, ``ready``, ``iter N TIME LOSS``, ``raise N TIME``) into the directory its environment
variable names, and raises once where the benchmark writes ``raise-rank{R}``.

- ``nanogpt``: karpathy/nanoGPT's train.py (tests/clients/nanogpt), its own tiny config and random-token data;
  iterations 0..``--iters``, a checkpoint every ``eval_interval``, resumed by ``init_from='resume'``.
- ``hf_clm``: HF Trainer, tests/clients/hf_clm/train_clm.py (run_clm.py's options and resume, for
  transformers 5.x), or any run_clm.py-like script given by ``--hf-script``, run unchanged under
  tests/clients/hf_clm/bench_stamps.py (a Trainer callback writes the stamps); a 2-layer GPT-2 (64 wide,
  block 64) built from ``--config_overrides``, a byte-level BPE tokenizer and a seeded text that prepare.py
  writes offline; steps 1..``--iters``, a checkpoint every ``--save_steps`` (the last 2 kept), resumed from the
  last ``checkpoint-N`` in ``--output_dir`` (transformers' get_last_checkpoint).  Datasets' and the hub's
  caches live in the benchmark's temporary directory, offline (HF_HUB_OFFLINE, HF_DATASETS_OFFLINE).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLIENTS = REPO / "tests" / "clients"


class NanoGPT:
    name = "nanogpt"
    title = "nanoGPT"
    stamps_env = "NANOGPT_BENCH_DIR"
    first_iter = 0                      # the first iteration rank 0 logs
    ft_packages, ft_modules = "numpy", ("numpy",)   # what ft_launcher's venv needs: its ranks run there
    defaults = {"iters": 450, "ckpt_every": 20, "every": 12.0}

    def __init__(self, tmp: Path, args):
        self.args = args
        self.dir = tmp / "nanogpt"      # a copy: its path marks this benchmark's rank processes
        shutil.copytree(CLIENTS / "nanogpt", self.dir)
        self.data = tmp / "data"
        (self.data / "synthetic").mkdir(parents=True)
        subprocess.run([sys.executable, str(self.dir / "data" / "synthetic" / "prepare.py"),
                        str(self.data / "synthetic")], check=True, stdout=subprocess.DEVNULL, timeout=60)
        self.env: dict[str, str] = {}

    def prepare_work(self, work: Path) -> None:
        os.symlink(self.dir / "configurator.py", work / "configurator.py")   # train.py reads it from its cwd
        os.symlink(self.data, work / "data")

    def script(self, work: Path) -> tuple[str, list[str]]:
        a = self.args
        return str(self.dir / "train.py"), [str(self.dir / "config" / "bench_cpu.py"), f"--max_iters={a.iters}",
                                            f"--lr_decay_iters={a.iters}", f"--eval_interval={a.ckpt_every}"]

    def describe(self) -> str:
        a = self.args
        return f"nanoGPT: {a.iters} iterations, a checkpoint every {a.ckpt_every}"


class HfClm:
    name = "hf_clm"
    title = "HF Trainer"
    stamps_env = "HF_CLM_BENCH_DIR"
    first_iter = 1
    ft_packages = "numpy transformers==5.25.0 datasets==5.2.0 accelerate==1.15.0"
    ft_modules = ("numpy", "transformers", "datasets", "accelerate")
    defaults = {"iters": 700, "ckpt_every": 50, "every": 20.0}
    overrides = "n_layer=2,n_head=2,n_embd=64,n_positions=64,vocab_size=512,resid_pdrop=0,embd_pdrop=0,attn_pdrop=0"

    def __init__(self, tmp: Path, args):
        self.args = args
        self.dir = tmp / "hf_clm"       # a copy: its path marks this benchmark's rank processes
        shutil.copytree(CLIENTS / "hf_clm", self.dir)
        self.train = Path(args.hf_script).resolve() if args.hf_script else self.dir / "train_clm.py"
        self.data = tmp / "hf_data"
        subprocess.run([sys.executable, str(self.dir / "prepare.py"), str(self.data)], check=True,
                       stdout=subprocess.DEVNULL, timeout=120)
        self.env = {"HF_HOME": str(tmp / "hf_home"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                    "TOKENIZERS_PARALLELISM": "false"}

    def prepare_work(self, work: Path) -> None:
        pass

    def script(self, work: Path) -> tuple[str, list[str]]:
        a = self.args
        return str(self.dir / "bench_stamps.py"), [
            str(self.train), "--model_type", "gpt2", "--config_overrides", self.overrides,
            "--tokenizer_name", str(self.data / "tokenizer"), "--train_file", str(self.data / "train.txt"),
            "--block_size", "64", "--output_dir", str(work / "out"), "--do_train", "--max_steps", str(a.iters),
            "--save_steps", str(a.ckpt_every), "--save_total_limit", "2", "--use_cpu", "--ddp_backend", "gloo",
            "--report_to", "none", "--per_device_train_batch_size", "8", "--learning_rate", "1e-3",
            "--logging_steps", "1", "--disable_tqdm", "true", "--seed", "46"]

    def describe(self) -> str:
        a = self.args
        return (f"HF Trainer ({self.train.name}): {a.iters} steps, a checkpoint every {a.ckpt_every} "
                f"(--save_steps)")


CLIENT_TYPES = {c.name: c for c in (NanoGPT, HfClm)}
