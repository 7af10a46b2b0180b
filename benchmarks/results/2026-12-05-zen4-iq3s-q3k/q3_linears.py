"""us per 8960 x 1536 linear of Q3_K values (random blocks converted to Q6_K at load), 2 threads, from memory: 8
different matrices per layout taken in turn (~95 MB as Q6_K, past the L3), min over 15 passes of the mean per
matrix, the layouts alternating each pass: the Q6_K layout this CPU's path packs (q6_k_layout(): Q6_K_X16 on
avx512-vnni) against Q3_K_X8, at 1 / 4 / 8 / 16 rows.
usage: PYTHONPATH=src python q3_linears.py [PATH]"""
import sys
import time

import numpy as np
import torch

from multidraft.models import gguf_convert, gguf_kernels as g
from tests.tiny_gguf import random_blocks

g.load(progress=False)
path = sys.argv[1] if len(sys.argv) > 1 else g.isa()
torch.set_num_threads(2)
rng = np.random.default_rng(0)
N, K, COPIES = 8960, 1536, 8
q6 = [torch.from_numpy(gguf_convert.q3_k_as_q6_k(random_blocks("Q3_K", N, K, rng, scale=0.05))) for _ in range(COPIES)]
layout = g.q6_k_layout()
mats = {g.PACKED[layout][1].__name__ if False else f"Q6_K({layout})": ([g.repack(b, layout) if layout != 14 else b
                                                                      for b in q6], layout),
        "Q3_K_X8": ([g.repack_q6_k_q3_k_x8(b) for b in q6], g.Q3_K_X8)}
del q6
print(path, {name: f"{sum(b.numel() for b in bs) / COPIES / 1e6:.2f} MB a matrix" for name, (bs, t) in mats.items()})
for rows in (1, 4, 8, 16):
    x = torch.randn(rows, K)
    best = {name: 1e9 for name in mats}
    for _ in range(15):
        for name, (blocks, t) in mats.items():
            start = time.perf_counter()
            for b in blocks:
                g.linear_q8_on(x, b, t, K, path)
            best[name] = min(best[name], (time.perf_counter() - start) / COPIES)
    print(path, rows, "rows:", ", ".join(f"{name} {us * 1e6:.0f}" for name, us in best.items()), flush=True)
