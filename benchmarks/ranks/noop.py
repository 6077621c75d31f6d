"""Rank script for bench_run.py: does nothing and exits 0 (imports nothing, least of all torch)."""
