"""Rank script for bench_steps.py: writes argv[1] Megatron-style step lines to stdout, as fast as it can."""
import os
import sys

rank = os.environ["RANK"]
write = sys.stdout.write
for i in range(int(sys.argv[1])):
    write(f" [rank {rank}] iteration {i:8d}/ 1000000 | consumed samples: {i * 8} | elapsed time per iteration "
          f"(ms): {100 + i % 7}.5 | learning rate: 1.000E-04 | lm loss: 2.345678E+00 |\n")
