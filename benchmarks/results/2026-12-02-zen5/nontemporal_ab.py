"""Weights prefetched non-temporally (1) or into L2 (0), alternating in one process (gguf_kernels.set_nontemporal_weights,
the same bits either way): per mode the forward's total time, the Python before the decoder stack, and the stack.
Usage: python nontemporal_ab.py MODEL ROUNDS ROWS (ten forwards per mode per round, after 300 cached tokens)."""
import statistics
import sys
import time

import torch

import multidraft
import multidraft.models.native as native
from multidraft.models import gguf_kernels

torch.set_num_threads(2)
rows = int(sys.argv[3])
lm = multidraft.load_model(sys.argv[1], runner="auto")
cache = lm.new_cache()
lm.forward(cache, [(1000 + i) % 40000 for i in range(300)], logits_rows=slice(-1, None))
stamps = {}
real_stack = gguf_kernels.decoder_stack


class Timed:                                  # gguf_kernels with the stack's entry and exit stamped
    def __getattr__(self, name):
        return getattr(gguf_kernels, name)

    @staticmethod
    def decoder_stack(*args):
        stamps["in"] = time.perf_counter()
        out = real_stack(*args)
        stamps["out"] = time.perf_counter()
        return out


native.gguf_kernels = Timed()
results = {}
for _ in range(int(sys.argv[2])):
    for mode in (False, True):
        gguf_kernels.set_nontemporal_weights(mode)
        for _ in range(10):
            start = time.perf_counter()
            lm.forward(cache, list(range(2000, 2000 + rows)))
            end = time.perf_counter()
            cache.crop(300)
            r = results.setdefault(mode, {"total": [], "before stack": [], "stack": []})
            r["total"].append(end - start)
            r["before stack"].append(stamps["in"] - start)
            r["stack"].append(stamps["out"] - stamps["in"])
for mode, r in results.items():
    print(sys.argv[1], "rows", rows, "nontemporal" if mode else "into L2    ",
          "  ".join("%s min %.0f median %.0f us" % (k, min(v) * 1e6, statistics.median(v) * 1e6) for k, v in r.items()))
