"""Q5_K, 8960 x 1536: fp32 activations (gguf_linear, the old path) against 8-bit activations (linear_q8 on the path
chosen here), 2 threads; 60 random matrices read in turn (~0.73 GB: from memory), min of 5 passes per row count."""
import time, torch
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
K, N = 1536, 8960
mats = [g.random_blocks(13, N, K, gen) for _ in range(60)]
print("path", g.isa())
for M in (1, 2, 4, 8, 16, 64):
    x = torch.randn(M, K)
    best = {}
    for rep in range(5):
        for name, f in (("fp32 activations", lambda w: g.linear(x, w, 13, K)), ("q8", lambda w: g.linear_q8(x, w, 13, K))):
            t0 = time.perf_counter()
            for w in mats: f(w)
            best[name] = min(best.get(name, 1e9), (time.perf_counter() - t0) / len(mats))
    print(f"rows {M:3d}: " + ", ".join(f"{k} {v*1e6:7.0f} us" for k, v in best.items()) + f"  ({best['fp32 activations']/best['q8']:.2f}x)")
