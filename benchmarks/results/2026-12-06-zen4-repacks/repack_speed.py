"""Every repack of the load (GGUF blocks -> the 8-bit kernels' packed layouts), one random 8960 x 1536 matrix each,
best of 5, ms and GB/s of the input read; the converted formats (Q3_K, IQ3_S) from their Q6_K blocks.

    PYTHONPATH=TREE/src python repack_speed.py [THREADS]       # from the repository's root
"""
import sys
import time

import numpy as np
import torch

from multidraft.models import gguf_kernels as g

sys.path.insert(0, ".")
from tests.tiny_gguf import random_blocks  # noqa: E402

assert g.load(progress=False)
torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
N, K = 8960, 1536
rng = np.random.default_rng(0)


def best(run, reps=5):
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


for packed, (plain, repack, _) in g.PACKED.items():
    blocks = torch.from_numpy(random_blocks(g.NATIVE_TYPES[plain], N, K, rng, scale=0.05))
    seconds = best(lambda: repack(blocks))
    print(f"{g.NATIVE_TYPES[plain]:7s} -> {packed}: {seconds * 1e3:6.1f} ms {blocks.numel() / seconds / 1e9:6.2f} GB/s")
generator = torch.Generator().manual_seed(0)
for source, (packed, repack) in g.CONVERTED_PACKS.items():
    blocks = g.random_converted_blocks(source, N, K, generator)
    seconds = best(lambda: repack(blocks))
    name = {11: "Q3_K", 21: "IQ3_S"}[source]
    rate = blocks.numel() / seconds / 1e9
    print(f"{name:7s} -> {packed} (its Q6_K blocks): {seconds * 1e3:6.1f} ms {rate:6.2f} GB/s")
