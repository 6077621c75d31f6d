"""A rank printing Megatron-style step lines; rank 2 takes 40% longer per step."""
import os
import time

slow = 1.4 if os.environ["RANK"] == "2" else 1.0
for step in range(1, 21):
    start = time.perf_counter()
    time.sleep(0.02 * slow)
    ms = (time.perf_counter() - start) * 1000
    print(f" iteration {step:8d}/      20 | elapsed time per iteration (ms): {ms:.1f} |", flush=True)
