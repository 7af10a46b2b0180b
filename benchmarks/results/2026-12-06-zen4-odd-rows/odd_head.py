"""A 151934 x 1536 Q6_K head (the 1.5B's vocabulary less 2): in GGUF's layout (how such a matrix ran before e05dc37)
vs packed with 2 padding rows, 2 threads, on the path chosen at load (MULTIDRAFT_ISA forces one); checks the bits match.

    PYTHONPATH=src python benchmarks/results/2026-12-06-zen4-odd-rows/odd_head.py
"""
import time, torch
from multidraft.models import gguf_kernels as g
from multidraft.models.gguf_weights import BlockMatrix
g.load(progress=False)
torch.set_num_threads(2)
blocks = g.random_blocks(14, 151934, 1536, torch.Generator().manual_seed(0))
plain = BlockMatrix(blocks, 14, 1536)
packed = BlockMatrix(blocks, 14, 1536); packed.pack_for_q8()
print("isa", g.isa(), "packed type", packed.packed_type, "padding", packed.padded_rows)
for rows in (1, 4, 8, 16):
    x = torch.randn(rows, 1536)
    assert torch.equal(plain.linear(x, q8=True), packed.linear(x, q8=True))
    res = {}
    for name, m in (("unpacked", plain), ("packed", packed)):
        best = 1e9
        for _ in range(5):
            t = time.perf_counter(); m.linear(x, q8=True); best = min(best, time.perf_counter() - t)
        res[name] = best * 1e3
    print(f"rows {rows:2d}: unpacked {res['unpacked']:6.2f} ms, packed {res['packed']:6.2f} ms")
