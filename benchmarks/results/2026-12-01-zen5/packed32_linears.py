"""Per linear: the 32-value formats in GGUF's layout against their X16_32 packing, on the avx512-vnni path, 1 and 2
threads (min of 200-300 calls; the same bits asserted). Usage: python packed32_linears.py"""
import time, torch, numpy as np
from multidraft.models import gguf_kernels as g
g.load()
from multidraft.models.gguf_kernels import random_blocks
gen = torch.Generator().manual_seed(0)
def t(fn, reps=200):
    for _ in range(5): fn()
    best = 1e9
    for _ in range(reps):
        a = time.perf_counter(); fn(); best = min(best, time.perf_counter() - a)
    return best * 1e6
for threads in (1, 2):
    torch.set_num_threads(threads)
    for name, plain, N, K in (("q4_1 gate 1536x576", 3, 1536, 576), ("q8_0 576x1536", 8, 576, 1536), ("q5_0 2048x640", 6, 2048, 640), ("q8_0 head 49152x576", 8, 49152, 576)):
        blocks = random_blocks(plain, N, K, gen)
        packed = g.repack_x16_32(blocks, plain)
        for M in (1, 2, 4, 8, 16):
            x = torch.randn(M, K, generator=gen)
            a = g.linear_q8_on(x, blocks, plain, K, "avx512-vnni"); b = g.linear_q8_on(x, packed, 100 + plain, K, "avx512-vnni")
            assert torch.equal(a.view(torch.int32), b.view(torch.int32))
            reps = 20 if N > 10000 else 300
            tp = t(lambda: g.linear_q8_on(x, blocks, plain, K, "avx512-vnni"), reps)
            tq = t(lambda: g.linear_q8_on(x, packed, 100 + plain, K, "avx512-vnni"), reps)
            print(f"threads {threads} {name} M={M}: plain {tp:8.1f} us  packed {tq:8.1f} us  ({tp/tq:.2f}x)")
