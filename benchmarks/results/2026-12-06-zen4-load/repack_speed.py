"""The Q6_K repacks' speed on the 1.5B's blocks (blk.0.ffn_down x 8, 94 MB), min of 5; `out_TAG.pt` keeps each
layout's output so two trees' bytes can be compared (`compare`).

    PYTHONPATH=TREE/src python repack_speed.py TAG          # times both repacks, writes /tmp/repack_TAG_*.pt
    python repack_speed.py compare OLD NEW                  # the two trees' outputs byte for byte
"""
import os
import sys
import time

import torch

if sys.argv[1] == "compare":
    for name in ("repack_q6_k_x16", "repack_q6_k_x8"):
        old, new = (torch.load(f"/tmp/repack_{tag}_{name}.pt") for tag in sys.argv[2:4])
        print(name, tuple(old.shape), "byte-identical:", torch.equal(old, new))
    sys.exit(0)

from multidraft.models import gguf_kernels
from multidraft.models.gguf_weights import GGUFWeights

assert gguf_kernels.load()
weights = GGUFWeights(os.path.expanduser("~/.cache/multidraft/models/qwen2.5-coder-1.5b/source.gguf"), 28)
blocks = torch.cat([weights.matrix("blk.0.ffn_down.weight").blocks.contiguous()] * 8).clone()
for name in ("repack_q6_k_x16", "repack_q6_k_x8"):
    repack, times = getattr(gguf_kernels, name), []
    for _ in range(5):
        start = time.perf_counter()
        out = repack(blocks)
        times.append(time.perf_counter() - start)
    print(f"{name}: {min(times):.3f} s, {blocks.numel() / 1e9 / min(times):.2f} GB/s")
    torch.save(out, f"/tmp/repack_{sys.argv[1]}_{name}.pt")
