"""A kernel variant's Q6_K_X16 on the avx512-vnni path against the scalar reference on the same layout and on GGUF's,
bit for bit, rows 1..17. PYTHONPATH=<tree>/src python q6check.py"""
import torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
gen = torch.Generator().manual_seed(1)
for (N, K) in ((1536, 8960), (256, 1536)):
    plain = g.random_blocks(14, N, K, gen)
    w = g.repack(plain, g.Q6_K_X16)
    for M in (1, 2, 3, 5, 8, 9, 16, 17):
        x = torch.randn(M, K, generator=gen) * 3
        a = g.linear_q8_on(x, w, g.Q6_K_X16, K, "avx512-vnni")
        b = g.linear_q8_on(x, w, g.Q6_K_X16, K, "scalar")
        c = g.linear_q8_on(x, plain, 14, K, "scalar")
        assert torch.equal(a, b) and torch.equal(b, c), (N, K, M)
print("bit-equal")
