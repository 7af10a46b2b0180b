"""1-row (or ROWS) Q4_K_X8 / Q5_K_X8 / Q6_K_X16 linear on avx512-vnni: hot (one matrix) and from memory (24 copies
cycled), 2 threads, beside a 1 GiB torch-sum read probe taken in the same rounds (best of 8).

    PYTHONPATH=src python benchmarks/results/2026-12-06-zen4-odd-rows/cold_one_row.py q4,q5[,q6] [ROWS]
"""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
torch.set_num_threads(2)
gen = torch.Generator().manual_seed(0)
table = {"q4": (12, g.Q4_K_X8), "q5": (13, g.Q5_K_X8), "q6": (14, g.Q6_K_X16)}
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1
probe = torch.ones(2 ** 28); probe.sum()
N, K = 8960, 1536
for name in sys.argv[1].split(","):
    plain, packed = table[name]
    ws = [g.repack(g.random_blocks(plain, N, K, gen), packed) for _ in range(24)]
    mb = ws[0].numel() * ws[0].element_size() / 1e6
    x = torch.randn(rows, K, generator=gen)
    hot = cold = 1e9; bw = 0
    for rep in range(8):
        t0 = time.perf_counter(); probe.sum(); bw = max(bw, probe.numel() * 4 / (time.perf_counter() - t0) / 1e9)
        t0 = time.perf_counter()
        for i in range(24): g.linear_q8_on(x, ws[0], packed, K, "avx512-vnni")
        hot = min(hot, (time.perf_counter() - t0) / 24)
        t0 = time.perf_counter()
        for i in range(24): g.linear_q8_on(x, ws[i], packed, K, "avx512-vnni")
        cold = min(cold, (time.perf_counter() - t0) / 24)
    print(f"{name} rows {rows}: hot {hot*1e6:5.0f} us, cold {cold*1e6:5.0f} us = {mb/1e3/cold:5.1f} GB/s; "
          f"probe {bw:5.1f} GB/s", flush=True)
