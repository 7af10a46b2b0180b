# usage: PYTHONPATH=src python attention_rows.py (from the repository root; in a worktree, PYTHONPATH=src keeps the
# editable install from importing another tree)
"""The attention op, the 1.5B's shape (12 query heads, 2 KV heads, D 128), 2 threads, 28 layers' caches in turn
(from memory, as in a forward): T new rows over S cached keys (causal among the new rows), and causal prefills of
P rows. us per layer, min of 12 passes."""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(); torch.set_num_threads(2)
H, KVH, D = 12, 2, 128
gen = torch.Generator().manual_seed(0)
def run(q, ks, vs, vis):
    best = 1e9
    for rep in range(12):
        t0 = time.perf_counter()
        for k, v in zip(ks, vs): g.attention(q, k, v, vis, 0.088)
        best = min(best, (time.perf_counter() - t0) / len(ks))
    return best * 1e6
out = []
for S in (256, 1024, 3072):
    ks = [torch.randn(KVH, S + 64, D, generator=gen) for _ in range(28)]
    vs = [torch.randn(KVH, S + 64, D, generator=gen) for _ in range(28)]
    for T in (1, 4, 8, 16):
        q = torch.randn(H, T, D, generator=gen)
        vis = torch.zeros(T, S + T, dtype=torch.bool); vis[:, :S] = True
        for t in range(T): vis[t, S:S + t + 1] = True
        out.append(f"S{S}/T{T} {run(q, ks, vs, vis):.0f}")
for P in (256, 1024):
    ks = [torch.randn(KVH, P, D, generator=gen) for _ in range(4)]
    vs = [torch.randn(KVH, P, D, generator=gen) for _ in range(4)]
    q = torch.randn(H, P, D, generator=gen)
    vis = torch.ones(P, P, dtype=torch.bool).tril()
    out.append(f"prefill{P} {run(q, ks, vs, vis):.0f}")
print(" ".join(out), flush=True)
