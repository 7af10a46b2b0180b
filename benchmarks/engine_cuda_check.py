"""The engine on a GPU (issue #31): a request's tokens alone (`generate_request`) and inside `generate_batch`, on a
tiny random model moved to CUDA in fp32 (the eager/fast runners are not batch-invariant by construction, so this
counts how often tokens stay identical), plus the on-device draw (issue #30) against the CPU draw.

    python benchmarks/engine_cuda_check.py            # prints one line per check and a summary
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests.tiny_models

import torch

import multidraft
from multidraft.sampling import draw, position_generator
from tests.tiny_models import make_tiny_lm


def main() -> int:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lm = make_tiny_lm("qwen2", seed=4)
    lm.model.to(device)
    lm.use_runner("auto")
    print(f"device {device}, runner {lm.runner}, torch {torch.__version__}")
    prompts = ["the cat sat on the mat and the cat sat on the", "a b c a b c a b", "one two three four",
               "the the the cat", "mat sat cat on the", "a a a a b b b b a a a a", "four three two one four three",
               "cat"]
    methods = [("greedy", {}), ("pld", {}), ("suffix", {}), ("sample", {"temperature": 0.8, "seed": 7})]
    same = total = 0
    for method, extra in methods:
        requests = [multidraft.Request.build(p, method, max_new_tokens=24, **extra) for p in prompts]
        alone = [multidraft.generate_request(lm, r).token_ids for r in requests]
        started = time.perf_counter()
        batched = [g.token_ids for g in multidraft.generate_batch(lm, requests, max_num_seqs=8)]
        seconds = time.perf_counter() - started
        hits = sum(a == b for a, b in zip(alone, batched))
        same, total = same + hits, total + len(prompts)
        print(f"{method}: {hits}/{len(prompts)} requests token-identical alone vs batch of 8 ({seconds:.2f} s batched)")
    probs = torch.softmax(torch.randn(50_000, generator=torch.Generator().manual_seed(0)), -1)
    cpu = [draw(probs, position_generator(3, i)) for i in range(200)]
    gpu = [draw(probs.to(device), position_generator(3, i)) for i in range(200)]
    print(f"draw: {sum(a == b for a, b in zip(cpu, gpu))}/200 equal on {device} and cpu")
    print(f"summary: {same}/{total} identical")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
