# usage: PYTHONPATH=src python attention_shapes.py
"""The attention op on smollm2's (9 heads, 3 KV heads, D 64) and gemma3-270m's (4, 1, 256) shapes: T rows over S
cached keys, 2 threads, layers' caches in turn, us a layer, min of 12."""
import time, torch
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
out = []
for name, H, KVH, D, L in (("smollm2", 9, 3, 64, 30), ("gemma3", 4, 1, 256, 18)):
    for S in (256, 1024):
        ks = [torch.randn(KVH, S + 64, D, generator=gen) for _ in range(L)]
        vs = [torch.randn(KVH, S + 64, D, generator=gen) for _ in range(L)]
        for T in (1, 8):
            q = torch.randn(H, T, D, generator=gen)
            vis = torch.zeros(T, S + T, dtype=torch.bool); vis[:, :S] = True
            for t in range(T): vis[t, S:S + t + 1] = True
            best = 1e9
            for rep in range(12):
                t0 = time.perf_counter()
                for k, v in zip(ks, vs): g.attention(q, k, v, vis, 0.1)
                best = min(best, (time.perf_counter() - t0) / L)
            out.append(f"{name} S{S}/T{T} {best*1e6:.0f}")
print(" ".join(out), flush=True)
