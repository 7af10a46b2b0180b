"""How much a forward of n new tokens costs relative to one, per model and dtype: the number that decides whether
drafting can pay on a machine (a drafted step costs one n-token forward plus the drafting).

    .venv/bin/python benchmarks/forward_cost.py qwen2.5-coder-1.5b bfloat16 float32

After a 300-token prefill, each n in 1, 2, 4, 8, 16 is timed 4 times (the first is a warm-up) with the project's
LM runner, cropping the cache back each time; the minimum is printed with its ratio to n = 1.
"""

import sys
import time

import torch

import multidraft


def main(model: str, dtypes: list[str]) -> None:
    torch.set_num_threads(2)
    for dtype in dtypes:
        lm = multidraft.load_model(model, dtype=dtype)
        cache, _ = lm.prefill(list(range(1000, 1300)))
        prefix = cache.length
        best = {}
        for n in (1, 2, 4, 8, 16):
            times = []
            for _ in range(4):
                start = time.perf_counter()
                lm.forward(cache, list(range(2000, 2000 + n)))
                times.append(time.perf_counter() - start)
                cache.crop(prefix)
            best[n] = min(times[1:])
        print(model, dtype, {n: f"{v * 1000:.0f}ms ({v / best[1]:.2f}x)" for n, v in best.items()}, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or ["bfloat16"])
