"""Runs an HF Trainer script (tests/clients/hf_clm/train_clm.py, or transformers' run_clm.py) unchanged, with
benchmarks/bench_false_hangs.py's slow spots and stop: ``python hf_faults.py [OPTIONS] -- SCRIPT [ARGS...]``.

A Trainer callback, added to every ``transformers.Trainer`` the script builds (as
tests/clients/hf_clm/bench_stamps.py adds its stamps), makes every rank's first step ``--load-seconds`` slower
(its first batch's loading), rank 0's every save ``--save-seconds`` longer (``on_save``, after the checkpoint is
written: the other ranks go on and wait for it in the next step's gradient all-reduce), and rank ``--stop-rank``
stop at the start of step ``--stop-at`` outside any collective, after writing the time into ``--stopped-file``;
rank 0 writes the time every step ends into ``--step-times`` (tqdm's bar says its elapsed time to the second).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--load-seconds", type=float, default=0.0)
parser.add_argument("--save-seconds", type=float, default=0.0)
parser.add_argument("--stop-rank", type=int, default=-1)
parser.add_argument("--stop-at", type=int, default=-1)
parser.add_argument("--stopped-file", default="")
parser.add_argument("--step-times", default="")
parser.add_argument("script")
parser.add_argument("script_args", nargs=argparse.REMAINDER)
RANK = int(os.environ.get("RANK", "0"))


def install(args) -> None:
    import transformers
    from transformers import TrainerCallback

    class Faults(TrainerCallback):
        first = True

        def on_step_begin(self, _args, state, control, **kwargs):
            if self.first:
                self.first = False
                time.sleep(args.load_seconds)
            if RANK == args.stop_rank and state.global_step + 1 == args.stop_at:
                with open(args.stopped_file, "w") as fh:
                    fh.write(str(time.time()))
                time.sleep(3600)

        def on_step_end(self, _args, state, control, **kwargs):
            if RANK == 0 and args.step_times:
                with open(args.step_times, "a") as fh:
                    fh.write(f"{time.time():.4f}\n")

        def on_save(self, _args, state, control, **kwargs):
            if RANK == 0:
                time.sleep(args.save_seconds)

    init = transformers.Trainer.__init__

    def with_faults(self, *a, **kw):
        init(self, *a, **kw)
        self.add_callback(Faults())

    transformers.Trainer.__init__ = with_faults


def main() -> None:
    argv = sys.argv[1:]
    if "--" in argv:
        argv.remove("--")
    args = parser.parse_args(argv)
    install(args)
    sys.argv = [args.script, *args.script_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
    runpy.run_path(args.script, run_name="__main__")


if __name__ == "__main__":
    main()
