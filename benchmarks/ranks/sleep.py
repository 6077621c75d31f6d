"""Rank script for bench_run.py: sleeps argv[1] seconds (default 1), then exits 0."""
import sys
import time

time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
