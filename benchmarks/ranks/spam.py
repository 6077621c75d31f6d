"""Rank script for bench_run.py: writes argv[1] lines to stdout, one sys.stdout.write per line."""
import os
import sys

rank = os.environ["RANK"]
write = sys.stdout.write
for i in range(int(sys.argv[1])):
    write(f"rank {rank} step {i:07d} loss 0.123456 lr 0.000100\n")
