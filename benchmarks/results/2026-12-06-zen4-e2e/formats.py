"""Every format's packed 8960 x 1536 matrix (random blocks) on one path, hot, 1 thread: us per call at 1 / 4 / 8 / 16
rows (min of 15).

    PYTHONPATH=src python benchmarks/results/2026-12-06-zen4-e2e/formats.py PATH FORMAT[,FORMAT...]
"""
import sys, time
import numpy as np, torch
from multidraft.models import gguf_kernels as g
sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks
assert g.load(progress=False)
path = sys.argv[1]
fmts = sys.argv[2].split(",")
torch.set_num_threads(1)
N, K = 8960, 1536
ids = {"Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q2_K": 10, "Q4_K": 12, "Q5_K": 13, "Q6_K": 14,
       "IQ4_XS": 23, "IQ4_NL": 20}
g.use_isa(path)
for f in fmts:
    rng = np.random.default_rng(0)
    blocks = torch.from_numpy(random_blocks(f, N, K, rng, scale=0.05))
    t = ids[f]
    packed = {12: g.Q4_K_X8, 13: g.Q5_K_X8 if g.packs_q5_k() else None, 23: g.IQ4_XS_X8, 10: g.Q2_K_X8,
              14: g.q6_k_layout() if g.q6_k_layout() != 14 else None}.get(t)
    if packed is None and t in g.X16_32 and g.packs_x16_32():
        packed = g.X16_32[t]
    m, tid = (g.repack(blocks, packed), packed) if packed else (blocks, t)
    x = torch.randn(16, K)
    out = []
    for rows in (1, 4, 8, 16):
        best = 1e9
        for _ in range(15):
            s = time.perf_counter()
            g.linear_q8_on(x[:rows], m, tid, K, path)
            best = min(best, time.perf_counter() - s)
        out.append(f"{rows}:{best*1e6:5.0f}")
    print(f"{f:7s} {path} {m.numel()/1e6:5.2f}MB", " ".join(out), flush=True)
