"""Timing only, on a tree patched by ../2026-12-04-zen5-amx-vector-parts/null_tiles.py (since 2026-12-05 it also
makes the Q5_K tile kernel's tile ops no-ops; these runs applied that step by hand:
    sed -i 's/amx_x8<EmulatedTilesVectorParts, true>/amx_x8<NullTiles, true>/' on the tree's q8_linear.inc)
Per row count, one 8960 x 1536 Q4_K_X8 and Q5_K_X8 matrix of random blocks, hot, 1 thread, the tile kernels' vector
code (amx-emulated-tiles, tiles at every row count) against the AVX512-VNNI kernels, min over 6 rounds x 3 calls, us.

    PYTHONPATH=TREE/src python q5_vector_parts.py
"""
import time

import torch

from multidraft.models import gguf_kernels as g

g.load(progress=False)
torch.set_num_threads(1)
gen = torch.Generator().manual_seed(1)
K, N = 1536, 8960
ROWS = (1, 8, 16, 64)
best = {}
for name, plain, packed in (("Q4_K", 12, g.Q4_K_X8), ("Q5_K", 13, g.Q5_K_X8)):
    w = g.repack(g.random_blocks(plain, N, K, gen), packed)
    for _ in range(6):
        for rows in ROWS:
            x = torch.randn(rows, K)
            for arm, path in (("tiles (no-op tile ops)", "amx-emulated-tiles"), ("avx512-vnni", "avx512-vnni")):
                g.set_amx_vnni_rows(0, 0)
                g.linear_q8_on(x, w, packed, K, path)
                for _ in range(3):
                    start = time.perf_counter()
                    g.linear_q8_on(x, w, packed, K, path)
                    key = (name, arm, rows)
                    best[key] = min(best.get(key, 1e9), time.perf_counter() - start)
for name in ("Q4_K", "Q5_K"):
    for arm in ("tiles (no-op tile ops)", "avx512-vnni"):
        print(name, arm, " ".join(f"{r}:{best[(name, arm, r)] * 1e6:.0f}" for r in ROWS))
