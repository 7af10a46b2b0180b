# usage: PYTHONPATH=src python attention_window.py
"""The attention op on gemma3-270m's shape (4 heads, 1 KV head, D 256) through a sliding window of 512 keys: T new
rows after S cached keys (causal, each row its last 512), 18 layers' caches in turn, 2 threads, us a layer, min of
12."""
import time, torch
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
H, KVH, D, L, WINDOW = 4, 1, 256, 18, 512
out = []
for S in (1024, 3072):
    ks = [torch.randn(KVH, S + 64, D, generator=gen) for _ in range(L)]
    vs = [torch.randn(KVH, S + 64, D, generator=gen) for _ in range(L)]
    for T in (1, 8, 16):
        q = torch.randn(H, T, D, generator=gen)
        vis = torch.zeros(T, S + T, dtype=torch.bool)
        for t in range(T): vis[t, max(0, S + t - WINDOW + 1):S + t + 1] = True
        best = 1e9
        for rep in range(12):
            t0 = time.perf_counter()
            for k, v in zip(ks, vs): g.attention(q, k, v, vis, 0.1)
            best = min(best, (time.perf_counter() - t0) / L)
        out.append(f"S{S}/T{T} {best*1e6:.0f}")
print(" ".join(out), flush=True)
