"""The attention op on a causal prefill of the 1.5B's shape (12 query heads, 2 KV heads, head size 128), random
inputs, 2 threads: ms a layer and multiply-adds a second (scores and values: H x T(T+1)/2 x D x 2), beside torch's
fp32 matrix product (MKL) on 2048 x 2048 as this machine's practical fp32 rate."""
import time

import torch

from multidraft.models import gguf_kernels

gguf_kernels.load()
torch.set_num_threads(2)


def best_of(run, times=3):
    run()
    best = float("inf")
    for _ in range(times):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


H, KVH, D = 12, 2, 128
for T in (1000, 2000, 4000):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, T, D, generator=g) for n in (H, KVH, KVH))
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    seconds = best_of(lambda: torch.ops.multidraft_gguf.attention(q, k, v, visible, D ** -0.5))
    print(f"T {T}: {seconds * 1e3:.1f} ms a layer (x 28 layers {seconds * 28:.2f} s), "
          f"{H * T * (T + 1) / 2 * D * 2 / seconds / 1e9:.1f} GMAC/s", flush=True)
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
print(f"torch fp32 2048^3 matrix product: {2048 ** 3 / best_of(lambda: a @ b, 5) / 1e9:.1f} GMAC/s")
