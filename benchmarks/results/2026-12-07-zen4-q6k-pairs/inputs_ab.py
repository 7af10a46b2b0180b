"""One packed matrix format (the avx512-vnni path's layout) at 1 / 2 / 4 / 8 / 16 input rows, two shapes of random
blocks: hot on 1 thread (one matrix, min of 15 calls) and from memory on 2 threads (8 copies in turn, min of 5
sweeps), us per call.

    PYTHONPATH=TREE/src python benchmarks/results/2026-12-07-zen4-q6k-pairs/inputs_ab.py LABEL [Q6_K|Q4_K|Q5_K]

A tree whose kernels fail the self-check at load (a timing-only patch) still runs: the path is named per call.
"""
import sys, time
from pathlib import Path
import numpy as np, torch
from multidraft.models import gguf_kernels as g
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.tiny_gguf import random_blocks

assert g.load(progress=False)
label = sys.argv[1]
fmt = sys.argv[2] if len(sys.argv) > 2 else "Q6_K"
try:
    g.use_isa("avx512-vnni")
except RuntimeError:
    pass
layout = {"Q6_K": g.q6_k_layout(), "Q4_K": g.Q4_K_X8, "Q5_K": g.Q5_K_X8}[fmt]
for N, K in ((1536, 8960), (8960, 1536)):
    rng = np.random.default_rng(0)
    mats = [g.repack(torch.from_numpy(random_blocks(fmt, N, K, rng, scale=0.05)), layout) for _ in range(8)]
    x = torch.randn(16, K)
    hot, cold = [], []
    for rows in (1, 2, 4, 8, 16):
        torch.set_num_threads(1)
        best = 1e9
        for _ in range(15):
            s = time.perf_counter()
            g.linear_q8_on(x[:rows], mats[0], layout, K, "avx512-vnni")
            best = min(best, time.perf_counter() - s)
        hot.append(f"{rows}:{best * 1e6:5.0f}")
        torch.set_num_threads(2)
        best = 1e9
        for _ in range(5):
            s = time.perf_counter()
            for m in mats:
                g.linear_q8_on(x[:rows], m, layout, K, "avx512-vnni")
            best = min(best, (time.perf_counter() - s) / 8)
        cold.append(f"{rows}:{best * 1e6:5.0f}")
    print(f"{label} {fmt} {N}x{K} hot-1t", " ".join(hot), "| mem-2t", " ".join(cold), flush=True)
