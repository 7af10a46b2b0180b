"""The 1.5B's 1-row forward with and without the software prefetch of x8_vnni_rows' one-row calls, alternating in one
process (gguf_kernels.set_one_row_prefetch), after 300 cached tokens.

    PYTHONPATH=src python benchmarks/results/2026-12-07-zen4-one-row-prefetch/one_row_ab.py THREADS [ROUNDS]

Per round and setting: 15 timed forwards after 2 warm-ups, its median and min (ms); then the read probe (GB/s, a 1 GB
torch.sum on the same threads), which moves with this VM's memory. q6_ab.py runs the same rounds with another setter."""
import statistics
import sys
import time

import torch

import multidraft
from multidraft.eval.forward_cost import ReadProbe
from multidraft.models import gguf_kernels


def alternate(threads: int, rounds: int, set_prefetch, label: str = "prefetch", before=None,
              model: str = "qwen2.5-coder-1.5b") -> None:
    """`rounds` rounds of both settings of `set_prefetch` (on / off, the order swapped every round), printed as they
    run, then over all rounds; `before(lm)` runs once after the model loads."""
    torch.set_num_threads(threads)
    lm = multidraft.load_model(model, runner="native")
    probe = ReadProbe()
    if before is not None:
        before(lm)
    times = {True: [], False: []}
    for r in range(rounds):
        for prefetch in ((True, False) if r % 2 == 0 else (False, True)):
            set_prefetch(prefetch)
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
            print(f"round {r} {label} {'on ' if prefetch else 'off'}: median {statistics.median(ms):.1f} "
                  f"min {min(ms):.1f} ms; probe {probe.gbps():.1f} GB/s", flush=True)
    for prefetch in (True, False):
        print(f"all rounds, {label} {'on ' if prefetch else 'off'}: median {statistics.median(times[prefetch]):.1f} "
              f"min {min(times[prefetch]):.1f} ms")


def report_choice(lm) -> None:
    chosen = gguf_kernels.set_one_row_prefetch(True)
    print(f"threads {torch.get_num_threads()}; chosen at load: software prefetch {'on' if chosen else 'off'}")


if __name__ == "__main__":
    alternate(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 6, gguf_kernels.set_one_row_prefetch,
              before=report_choice)
