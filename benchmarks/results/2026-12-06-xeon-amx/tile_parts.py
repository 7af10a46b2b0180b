"""Timing only, on a tree patched by ../2026-12-04-zen5-amx-vector-parts/null_tiles.py: per row count, the tile
kernels on the real amx path against the same kernels' vector code alone (amx-emulated-tiles with no-op tile ops:
results wrong), both on the tiles at every row count (set_amx_vnni_rows(0, 0)), one 8960 x 1536 Q4_K_X8 and one
1536 x 8960 Q6_K_X16 matrix of random blocks, hot, alternating in one process, min over rounds x 3 calls, us.

    PYTHONPATH=TREE/src python tile_parts.py 1,8,16,64 1 8
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
shapes = {"Q4_K": (12, g.Q4_K_X8, 8960, 1536), "Q6_K": (14, g.Q6_K_X16, 1536, 8960)}
cases = {name: (g.repack(g.random_blocks(plain, N, K, gen), packed), packed, K)
         for name, (plain, packed, N, K) in shapes.items()}
paths = ("amx", "amx-emulated-tiles")
best = {}
for _ in range(rounds):
    for name, (w, t, K) in cases.items():
        for rows in rows_list:
            x = torch.randn(rows, K)
            for path in paths:
                g.linear_q8_on(x, w, t, K, path)
                for _ in range(3):
                    start = time.perf_counter()
                    g.linear_q8_on(x, w, t, K, path)
                    key = (name, rows, path)
                    best[key] = min(best.get(key, 1e9), time.perf_counter() - start)
print("rows: real tiles / vector code alone (us)")
for name in cases:
    print(name, " ".join(f"{r}: {best[(name, r, paths[0])] * 1e6:.0f}/{best[(name, r, paths[1])] * 1e6:.0f}"
                         for r in rows_list))
