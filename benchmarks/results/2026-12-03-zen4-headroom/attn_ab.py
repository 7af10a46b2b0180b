"""The attention op alone (the 1.5B's shape: 12 query heads, 2 KV heads, 128 wide; 2 threads): 1 and 8 query rows over
300 / 700 / 3000 cached keys, min of 40 calls, us per layer, one line per process. Run trees alternately:
PYTHONPATH=<tree>/src python attn_ab.py"""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
H, KVH, D = 12, 2, 128
out = []
for S in (300, 700, 3000):
    k = torch.randn(1, KVH, S + 64, D, generator=gen); v = torch.randn(1, KVH, S + 64, D, generator=gen)
    for T in (1, 8):
        q = torch.randn(H, T, D, generator=gen)
        vis = torch.zeros(T, S + T, dtype=torch.bool); vis[:, :S] = True
        for t in range(T): vis[t, S:S + t + 1] = True
        best = 1e9
        for rep in range(40):
            t0 = time.perf_counter(); g.attention(q, k, v, vis, D ** -0.5); best = min(best, time.perf_counter() - t0)
        out.append(f"S{S}T{T}:{best*1e6:.0f}")
print(" ".join(out))
