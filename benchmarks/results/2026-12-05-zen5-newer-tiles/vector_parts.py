"""Timing only, on a tree patched by null_tiles.py: one 8960 x 1536 matrix per format (random blocks, hot in the
caches), per row count the min over reps of one call on a path (default amx-emulated-tiles with the tile kernels at
every row count: their vector parts alone; or a real path, e.g. avx512-vnni, for scale).

    PYTHONPATH=TREE/src python vector_parts.py 1,4,8,16,32 1 20 [PATH]
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
g.set_amx_vnni_rows(0, 0)
generator = torch.Generator().manual_seed(1)
K, N = 1536, 8960
formats = (("Q4_K", 12, g.Q4_K_X8), ("Q6_K", 14, g.Q6_K_X16), ("IQ4_XS", 23, g.IQ4_XS_X8), ("Q2_K", 10, g.Q2_K_X8))
cases = {name: (g.repack(g.random_blocks(plain, N, K, generator), packed), packed) for name, plain, packed in formats}
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
            out.append(f"{rows}: {best * 1e6:7.1f}")
        print(f"{path} {t} thread(s) {name:7s} us  " + "  ".join(out), flush=True)
