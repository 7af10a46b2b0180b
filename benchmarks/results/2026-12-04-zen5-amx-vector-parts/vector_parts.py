"""Timing only, on a tree patched by null_tiles.py: one 8960 x 1536 Q4_K_X8 and one Q6_K_X16 matrix (random blocks,
hot in the caches), per row count the min over reps of one call on the amx-emulated-tiles path, i.e. the tile
kernels' vector parts alone (trees from 140d0df on: the tile kernels at every row count via set_amx_vnni_rows).

    PYTHONPATH=TREE/src python vector_parts.py 4,8,16,32,64 1 20
"""
import sys
import time

import torch

from multidraft.models import gguf_kernels as g

rows_list = [int(r) for r in sys.argv[1].split(",")]
threads = [int(t) for t in sys.argv[2].split(",")]
reps = int(sys.argv[3])
path = sys.argv[4] if len(sys.argv) > 4 else "amx-emulated-tiles"
g.load(progress=False)
if hasattr(g, "set_amx_vnni_rows"):
    g.set_amx_vnni_rows(0, 0)
generator = torch.Generator().manual_seed(1)
K, N = 1536, 8960
# argv[5] (optional): the packed layouts to time, from these (IQ4_XS_X8 and Q2_K_X8: trees from 2026-12-05 on)
layouts = {"Q4_K": (12, "Q4_K_X8"), "Q6_K": (14, "Q6_K_X16"), "IQ4_XS": (23, "IQ4_XS_X8"), "Q2_K": (10, "Q2_K_X8")}
names = sys.argv[5].split(",") if len(sys.argv) > 5 else ["Q4_K", "Q6_K"]
cases = {name: (g.repack(g.random_blocks(layouts[name][0], N, K, generator), getattr(g, layouts[name][1])),
                getattr(g, layouts[name][1])) for name in names}
for t in threads:
    torch.set_num_threads(t)
    for name, (w, type_id) in cases.items():
        out = []
        for rows in rows_list:
            x = torch.randn(rows, K)
            g.linear_q8_on(x, w, type_id, K, path)
            best = float("inf")
            for _ in range(reps):
                start = time.perf_counter()
                g.linear_q8_on(x, w, type_id, K, path)
                best = min(best, time.perf_counter() - start)
            out.append(f"{rows}:{best * 1e6:.0f}")
        print(f"threads {t} {name} " + " ".join(out), flush=True)
