"""What PLD+(attention) pays per step to see its induction heads' attention: the eager kernel vs query/key hooks.

    .venv/bin/python benchmarks/results/2026-11-22-pld-plus/attention_capture_cost.py qwen2.5-coder-1.5b bfloat16

After a 600-token prefill, a forward of n new tokens (n = 1, 5) is timed 8 times (median of the last 7) on one
model switched between kernels: sdpa alone, sdpa + the 50 calibrated heads captured by hooks (queries and keys,
then the one row PLD+ ranks with computed from them), eager alone, eager + the same heads' weights.
"""

import statistics
import sys
import time

import torch

import multidraft
from multidraft.pldplus.calibration import default_induction_heads as default_heads


def timed(lm, cache, prefix, n, heads):
    times = []
    for _ in range(8):
        start = time.perf_counter()
        out = lm.forward(cache, list(range(2000, 2000 + n)), attention_heads=heads)
        if heads and not isinstance(out.attention, torch.Tensor):
            out.attention.weights(n - 1, range(prefix + n))
        times.append(time.perf_counter() - start)
        cache.crop(prefix)
    return statistics.median(times[1:])


def main(model: str, dtype: str) -> None:
    torch.set_num_threads(2)
    lm = multidraft.load_model(model, dtype=dtype)
    heads = default_heads(lm, 50)
    for kernel in ("sdpa", "eager"):
        lm.model.set_attn_implementation(kernel)
        cache, _ = lm.prefill(list(range(1000, 1600)))
        prefix = cache.length
        for n in (1, 5):
            plain = timed(lm, cache, prefix, n, None)
            captured = timed(lm, cache, prefix, n, heads)
            print(f"{model} {dtype} {kernel:5s} n={n}: forward {plain * 1000:.0f} ms, with 50 heads captured "
                  f"{captured * 1000:.0f} ms ({captured / plain:.2f}x)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "bfloat16")
