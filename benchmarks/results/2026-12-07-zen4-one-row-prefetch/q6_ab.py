"""Experiment, not landed: Q6_K's one-row kernel (x16_vnni_rows) with and without its software prefetch, Q4_K's
left to the hardware (as landed), alternating in one process; else as one_row_ab.py. Needs a build of
q6_one_row.patch (a worktree of 02c9fdf with it applied): PYTHONPATH=src python q6_ab.py THREADS ROUNDS"""
import statistics, sys, time
import torch
import multidraft
from multidraft.eval.forward_cost import ReadProbe
from multidraft.models import gguf_kernels
threads = int(sys.argv[1]); rounds = int(sys.argv[2])
torch.set_num_threads(threads)
lm = multidraft.load_model("qwen2.5-coder-1.5b", runner="native")
probe = ReadProbe()
gguf_kernels.set_one_row_prefetch(False)
times = {True: [], False: []}
for r in range(rounds):
    for prefetch in ((True, False) if r % 2 == 0 else (False, True)):
        torch.ops.multidraft_gguf.set_one_row_prefetch_q6(prefetch)
        cache = lm.new_cache()
        lm.forward(cache, list(range(1000, 1300)))
        for _ in range(2):
            lm.forward(cache, [5]); cache.crop(300)
        ms = []
        for _ in range(15):
            start = time.perf_counter(); lm.forward(cache, [5]); ms.append((time.perf_counter() - start) * 1e3)
            cache.crop(300)
        times[prefetch] += ms
        print(f"round {r} q6 prefetch {'on ' if prefetch else 'off'}: median {statistics.median(ms):.1f} "
              f"min {min(ms):.1f} ms; probe {probe.gbps():.1f} GB/s", flush=True)
for prefetch in (True, False):
    print(f"all rounds, q6 prefetch {'on ' if prefetch else 'off'}: median {statistics.median(times[prefetch]):.1f} "
          f"min {min(times[prefetch]):.1f} ms")
