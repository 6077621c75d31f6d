# changed: a new dataset for benchmarks/bench_goodput.py, written as data/shakespeare_char/prepare.py writes its own (uint16
# train.bin and val.bin, meta.pkl with vocab_size): random tokens, since nothing can be downloaded here.
import os
import pickle
import sys

import numpy as np

out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)
vocab_size = 65
rng = np.random.default_rng(1337)
train_ids = rng.integers(0, vocab_size, 200_000, dtype=np.uint16)
val_ids = rng.integers(0, vocab_size, 20_000, dtype=np.uint16)
print(f"train has {len(train_ids):,} tokens")
print(f"val has {len(val_ids):,} tokens")
train_ids.tofile(os.path.join(out, 'train.bin'))
val_ids.tofile(os.path.join(out, 'val.bin'))
with open(os.path.join(out, 'meta.pkl'), 'wb') as f:
    pickle.dump({'vocab_size': vocab_size}, f)
