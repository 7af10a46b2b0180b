"""The 8-bit kernels per path and row count on random 8960 x 1536 matrices, from memory: 160 matrices read in turn
(1.2 GB of Q4_K), the variants interleaved in one process, min over 6 passes. Q4_K on the GGUF layout (AVX2 and
AVX512-VNNI kernels), Q4_K packed in eights (x8_rows on "avx2"; on "amx" the tile kernel from 4 rows), Q6_K (AVX2,
AVX512-VNNI). Every variant's outputs are checked bit-equal first. Usage: PYTHONPATH=src python kernel_paths.py
THREADS ROWS..."""
import sys
import time

import torch

from multidraft.models import gguf_kernels as g

g.load()
torch.set_num_threads(int(sys.argv[1]))
gen = torch.Generator().manual_seed(0)
K, N, mats = 1536, 8960, 160
q4 = [g.random_blocks(12, N, K, gen) for _ in range(mats)]
x8 = [g.repack_q4_k_x8(b) for b in q4]
q6 = [g.random_blocks(14, N, K, gen) for _ in range(mats)]
print(f"isa {g.isa()}; {mats} matrices {N} x {K}; Q4_K {q4[0].numel() / 1e6:.2f} MB, packed {x8[0].numel() / 1e6:.2f}, "
      f"Q6_K {q6[0].numel() / 1e6:.2f} each")
for M in [int(a) for a in sys.argv[2:]]:
    x = torch.randn(M, K)
    variants = {
        "q4k/avx2": lambda i: g.linear_q8_on(x, q4[i], 12, K, "avx2"),
        "q4k/avx512-vnni": lambda i: g.linear_q8_on(x, q4[i], 12, K, "avx512-vnni"),
        "x8/avx2": lambda i: g.linear_q8_on(x, x8[i], g.Q4_K_X8, K, "avx2"),
        "x8/amx": lambda i: g.linear_q8_on(x, x8[i], g.Q4_K_X8, K, "amx"),
        "q6k/avx2": lambda i: g.linear_q8_on(x, q6[i], 14, K, "avx2"),
        "q6k/avx512-vnni": lambda i: g.linear_q8_on(x, q6[i], 14, K, "avx512-vnni"),
    }
    variants = {k: f for k, f in variants.items() if not g.missing_flag(k.split("/")[1])}
    reference = {12: g.linear_q8_on(x, q4[0], 12, K, "scalar"), 14: g.linear_q8_on(x, q6[0], 14, K, "scalar")}
    for name, f in variants.items():
        assert torch.equal(f(0), reference[14 if name.startswith("q6k") else 12]), name
    best = {k: 1e9 for k in variants}
    for rep in range(6):
        for name, f in variants.items():
            t0 = time.perf_counter()
            for i in range(mats):
                f(i)
            best[name] = min(best[name], (time.perf_counter() - t0) / mats)
    print(f"rows {M:3d}  " + "  ".join(f"{k} {v * 1e6:6.0f} us" for k, v in best.items()), flush=True)
