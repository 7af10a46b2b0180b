"""Q6_K per path: the GGUF layout (avx2, avx512-vnni kernels) against Q6_K_X16 on amx (and its AVX2 fallback), 110
random 8960 x 1536 matrices read in turn, interleaved, min of 5; outputs checked against the scalar reference first.
Usage: PYTHONPATH=src python q6_paths.py THREADS ROWS..."""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load()
torch.set_num_threads(int(sys.argv[1]))
gen = torch.Generator().manual_seed(0)
K, N, mats = 1536, 8960, 110
q6 = [g.random_blocks(14, N, K, gen) for _ in range(mats)]
x16 = [g.repack_q6_k_x16(b) for b in q6]
for M in [int(a) for a in sys.argv[2:]]:
    x = torch.randn(M, K)
    variants = {
        "q6k/avx2": lambda i: g.linear_q8_on(x, q6[i], 14, K, "avx2"),
        "q6k/avx512-vnni": lambda i: g.linear_q8_on(x, q6[i], 14, K, "avx512-vnni"),
        "x16/amx": lambda i: g.linear_q8_on(x, x16[i], g.Q6_K_X16, K, "amx"),
        "x16/avx2": lambda i: g.linear_q8_on(x, x16[i], g.Q6_K_X16, K, "avx2"),
    }
    ref = g.linear_q8_on(x, q6[0], 14, K, "scalar")
    for name, f in variants.items():
        assert torch.equal(f(0), ref), name
    best = {k: 1e9 for k in variants}
    for rep in range(5):
        for name, f in variants.items():
            t0 = time.perf_counter()
            for i in range(mats):
                f(i)
            best[name] = min(best[name], (time.perf_counter() - t0) / mats)
    print(f"rows {M:3d}  " + "  ".join(f"{k} {v * 1e6:6.0f} us" for k, v in best.items()), flush=True)
