"""The engine on a GPU (issue #31): a request's tokens alone (`generate_request`) and inside `generate_batch`, on a
tiny random model moved to CUDA in fp32 (the eager/fast runners are not batch-invariant by construction, so this
counts how often tokens stay identical), plus the on-device draw (issue #30) against the CPU draw.

    multidraft check engine-cuda            # prints one line per check and a summary (CPU: a dry run)
"""

from __future__ import annotations

import multidraft
from multidraft.eval.bench_args import add_device_argument
from multidraft.eval.presets.source_tree import tests_module
from multidraft.eval.timing import Span, device_sync
from multidraft.sampling import draw, position_generator


def add_arguments(parser) -> None:
    add_device_argument(parser)


def run(args) -> int:
    import torch
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    lm = tests_module("tiny_models").make_tiny_lm("qwen2", seed=4)
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
        with Span(sync=device_sync(device)) as span:
            batched = [g.token_ids for g in multidraft.generate_batch(lm, requests, max_num_seqs=8)]
        seconds = span.seconds
        hits = sum(a == b for a, b in zip(alone, batched))
        same, total = same + hits, total + len(prompts)
        print(f"{method}: {hits}/{len(prompts)} requests token-identical alone vs batch of 8 ({seconds:.2f} s batched)")
    probs = torch.softmax(torch.randn(50_000, generator=torch.Generator().manual_seed(0)), -1)
    cpu = [draw(probs, position_generator(3, i)) for i in range(200)]
    gpu = [draw(probs.to(device), position_generator(3, i)) for i in range(200)]
    print(f"draw: {sum(a == b for a, b in zip(cpu, gpu))}/200 equal on {device} and cpu")
    print(f"summary: {same}/{total} identical")
    return 0

