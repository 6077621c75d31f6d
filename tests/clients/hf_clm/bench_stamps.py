"""Runs an HF Trainer script (train_clm.py, or transformers' own run_clm.py) unchanged, with
benchmarks/bench_goodput.py's stamps: ``python bench_stamps.py SCRIPT [SCRIPT ARGS...]``.

With HF_CLM_BENCH_DIR set it writes, per process, ``rank{RANK}-{pid}.log`` in that directory: ``start`` (before
``import torch``), ``imported`` (torch imported), ``ready`` (the Trainer's on_train_begin: process group, model,
data and the checkpoint loaded), ``iter STEP TIME LOSS`` for every step rank 0 logs (the script's
``--logging_steps 1``), and ``raise STEP TIME`` when it raises because the benchmark wrote ``raise-rank{RANK}``
there (a RuntimeError at the start of its next step, once). A Trainer callback carries the stamps: every
``transformers.Trainer`` the script builds gets it. Without HF_CLM_BENCH_DIR it only runs SCRIPT.
"""

from __future__ import annotations

import os
import runpy
import sys
import time

_dir = os.environ.get("HF_CLM_BENCH_DIR")
_rank = os.environ.get("RANK", "0")
_log = open(os.path.join(_dir, f"rank{_rank}-{os.getpid()}.log"), "a", buffering=1) if _dir else None


def _stamp(line: str) -> None:
    if _log:
        _log.write(line + "\n")


def _install() -> None:
    import transformers
    from transformers import TrainerCallback

    raise_path = os.path.join(_dir, f"raise-rank{_rank}") if _dir else None

    class Stamps(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            _stamp(f"ready {time.time():.6f}")

        def on_step_begin(self, args, state, control, **kwargs):
            if raise_path and os.path.exists(raise_path):
                os.unlink(raise_path)
                _stamp(f"raise {state.global_step} {time.time():.6f}")
                raise RuntimeError(f"bench_goodput: rank {_rank} raises at step {state.global_step + 1}")

        def on_log(self, args, state, control, logs=None, **kwargs):
            if state.is_world_process_zero and logs and "loss" in logs:
                _stamp(f"iter {state.global_step} {time.time():.6f} {float(logs['loss'])!r}")

    init = transformers.Trainer.__init__

    def with_stamps(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.add_callback(Stamps())

    transformers.Trainer.__init__ = with_stamps


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: bench_stamps.py SCRIPT [ARGS...]")
    _stamp(f"start {time.time():.6f}")
    import torch  # noqa: F401  (timed: the stamp below)

    _stamp(f"imported {time.time():.6f}")
    _install()
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
