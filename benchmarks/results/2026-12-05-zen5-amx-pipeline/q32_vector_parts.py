"""Timing only, on a tree patched by ../2026-12-04-zen5-amx-vector-parts/null_tiles.py (since 2026-12-05 it also
makes the 32-value tile kernel's tile ops no-ops; these runs applied that step by hand:
    sed -i 's/else amx_x16_32<EmulatedTilesVectorParts, TYPE>/else amx_x16_32<NullTiles, TYPE>/')
Per row count, Q4_0, Q5_0 and Q8_0 (the formats with a tile kernel) in smollm2-135m's gate shape (1536 x 576; Q8_0 576
x 1536), random blocks packed in sixteens, hot, 1 thread, the tile kernel's vector code (amx-emulated-tiles, tiles at
every row count) against the AVX512-VNNI kernel, min over 6 rounds x 5 calls, us.

    PYTHONPATH=TREE/src python q32_vector_parts.py
"""
import time

import torch

from multidraft.models import gguf_kernels as g

g.load(progress=False)
torch.set_num_threads(1)
gen = torch.Generator().manual_seed(1)
ROWS = (1, 8, 16, 64, 192)
best = {}
FORMATS = (("Q4_0", 2, (1536, 576)), ("Q5_0", 6, (1536, 576)), ("Q8_0", 8, (576, 1536)))
for name, plain, (N, K) in FORMATS:
    w = g.repack(g.random_blocks(plain, N, K, gen), g.X16_32[plain])
    for _ in range(6):
        for rows in ROWS:
            x = torch.randn(rows, K)
            for arm, path in (("tiles (no-op tile ops)", "amx-emulated-tiles"), ("avx512-vnni", "avx512-vnni")):
                g.set_amx_vnni_rows(0, 0)
                g.linear_q8_on(x, w, g.X16_32[plain], K, path)
                for _ in range(5):
                    start = time.perf_counter()
                    g.linear_q8_on(x, w, g.X16_32[plain], K, path)
                    key = (name, arm, rows)
                    best[key] = min(best.get(key, 1e9), time.perf_counter() - start)
for name, _, _ in FORMATS:
    for arm in ("tiles (no-op tile ops)", "avx512-vnni"):
        print(name, arm, " ".join(f"{r}:{best[(name, arm, r)] * 1e6:.0f}" for r in ROWS))
