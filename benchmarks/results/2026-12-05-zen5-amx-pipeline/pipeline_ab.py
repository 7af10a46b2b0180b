"""Timing only, on a tree patched by ../2026-12-04-zen5-amx-vector-parts/null_tiles.py (tile ops as no-ops): the tile
kernels' vector code with their tile products and epilogues overlapped (set_amx_pipelined(True), the default) or in
turn (False), one 8960 x 1536 Q4_K_X8 and one Q6_K_X16 matrix of random blocks, hot, both orders alternating in one
process, min over rounds x 3 calls; prints "rows: in turn / overlapped" in us.

    PYTHONPATH=TREE/src python pipeline_ab.py 1,8,16,64,192 1 8
"""
import sys
import time

import torch

from multidraft.models import gguf_kernels as g

g.load(progress=False)
g.set_amx_vnni_rows(0, 0)
rows_list = [int(r) for r in sys.argv[1].split(",")]
torch.set_num_threads(int(sys.argv[2]))
rounds = int(sys.argv[3])
gen = torch.Generator().manual_seed(1)
K, N = 1536, 8960
cases = {name: (g.repack(g.random_blocks(plain, N, K, gen), packed), packed)
         for name, plain, packed in (("Q4_K", 12, g.Q4_K_X8), ("Q6_K", 14, g.Q6_K_X16))}
best = {}
for _ in range(rounds):
    for name, (w, t) in cases.items():
        for rows in rows_list:
            x = torch.randn(rows, K)
            for pipelined in (False, True):
                g.set_amx_pipelined(pipelined)
                g.linear_q8_on(x, w, t, K, "amx-emulated-tiles")
                for _ in range(3):
                    start = time.perf_counter()
                    g.linear_q8_on(x, w, t, K, "amx-emulated-tiles")
                    key = (name, rows, pipelined)
                    best[key] = min(best.get(key, 1e9), time.perf_counter() - start)
for name in cases:
    pairs = [f"{r}: {best[(name, r, False)] * 1e6:.0f}/{best[(name, r, True)] * 1e6:.0f}" for r in rows_list]
    print(name, " ".join(pairs))
