"""The 1.5B's 1-row forward with and without the software prefetch of x8_vnni_rows' one-row calls, alternating in one
process (gguf_kernels.set_one_row_prefetch), after 300 cached tokens.

    PYTHONPATH=src python benchmarks/results/2026-12-07-zen4-one-row-prefetch/one_row_ab.py THREADS [ROUNDS]

Per round and setting: 15 timed forwards after 2 warm-ups, its median and min (ms); then the read probe (GB/s, a 1 GB
torch.sum on the same threads), which moves with this VM's memory."""
import statistics
import sys
import time

import torch

import multidraft
from multidraft.eval.forward_cost import ReadProbe
from multidraft.models import gguf_kernels

threads = int(sys.argv[1])
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
torch.set_num_threads(threads)
lm = multidraft.load_model("qwen2.5-coder-1.5b", runner="native")
probe = ReadProbe()
chosen = gguf_kernels.set_one_row_prefetch(True)
print(f"threads {threads}; chosen at load: software prefetch {'on' if chosen else 'off'}")
times = {True: [], False: []}
for r in range(rounds):
    for prefetch in ((True, False) if r % 2 == 0 else (False, True)):
        gguf_kernels.set_one_row_prefetch(prefetch)
        cache = lm.new_cache()
        lm.forward(cache, list(range(1000, 1300)))
        for _ in range(2):
            lm.forward(cache, [5])
            cache.crop(300)
        ms = []
        for _ in range(15):
            start = time.perf_counter()
            lm.forward(cache, [5])
            ms.append((time.perf_counter() - start) * 1e3)
            cache.crop(300)
        times[prefetch] += ms
        print(f"round {r} prefetch {'on ' if prefetch else 'off'}: median {statistics.median(ms):.1f} "
              f"min {min(ms):.1f} ms; probe {probe.gbps():.1f} GB/s", flush=True)
for prefetch in (True, False):
    print(f"all rounds, prefetch {'on ' if prefetch else 'off'}: median {statistics.median(times[prefetch]):.1f} "
          f"min {min(times[prefetch]):.1f} ms")
gguf_kernels.set_one_row_prefetch(chosen)
