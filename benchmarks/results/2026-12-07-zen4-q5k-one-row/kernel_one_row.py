"""Q5_K and Q4_K packed in eights, one input row, 8 random matrices from memory on 2 threads (min of 5 sweeps), with
the one-row software prefetch setting on and off alternating, four rounds, us per call:

    PYTHONPATH=src python benchmarks/results/2026-12-07-zen4-q5k-one-row/kernel_one_row.py
"""
import sys, time
from pathlib import Path
import numpy as np, torch
from multidraft.models import gguf_kernels as g
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.tiny_gguf import random_blocks
assert g.load(progress=False)
g.use_isa("avx512-vnni")
torch.set_num_threads(2)
for fmt, layout in (("Q5_K", g.Q5_K_X8), ("Q4_K", g.Q4_K_X8)):
    for N, K in ((1536, 8960), (8960, 1536)):
        rng = np.random.default_rng(0)
        mats = [g.repack(torch.from_numpy(random_blocks(fmt, N, K, rng, scale=0.05)), layout) for _ in range(8)]
        x = torch.randn(1, K)
        res = {True: [], False: []}
        for rnd in range(4):
            for on in (True, False):
                g.set_one_row_prefetch(on)
                best = 1e9
                for _ in range(5):
                    s = time.perf_counter()
                    for m in mats: g.linear_q8_on(x, m, layout, K, "avx512-vnni")
                    best = min(best, (time.perf_counter() - s) / 8)
                res[on].append(round(best * 1e6))
        print(fmt, f"{N}x{K}", "1 row from memory, 2 threads, us: prefetch on", res[True], "off", res[False],
              flush=True)
