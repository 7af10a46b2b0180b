"""The GGUF kernels' attention op on random fp32 heads of the 1.5B's shape (12 query heads over 2 KV heads of 128),
1 or 8 rows over 300 or 3000 visible keys, on 1 and 2 threads: min of 30 calls, us.

    PYTHONPATH=TREE/src python benchmarks/results/2026-12-08-zen4-build-and-suite/attention_ab.py LABEL"""
import sys
import time

import torch

from multidraft.models import gguf_kernels as g

assert g.load(progress=False)
torch.manual_seed(0)
out = []
for rows, keys in ((1, 3000), (8, 3000), (8, 300)):
    q = torch.randn(12, rows, 128)
    k, v = torch.randn(2, keys + 64, 128), torch.randn(2, keys + 64, 128)
    positions = torch.arange(keys)
    visible = positions[None, :] <= positions[-rows:, None]
    for threads in (1, 2):
        torch.set_num_threads(threads)
        best = 1e9
        for _ in range(30):
            started = time.perf_counter()
            g.attention(q, k, v, visible, 128 ** -0.5)
            best = min(best, time.perf_counter() - started)
        out.append(f"{rows}x{keys}/{threads}t {best * 1e6:6.0f}")
print(sys.argv[1], " ".join(out))
