"""Logit differences and token identity of requests alone vs inside batches (counts only, no timings).

    multidraft check batch-bits                                  # smollm2-135m, eager fp32 (the default here)
    multidraft check batch-bits --runner quantized-q8            # must print 0.0 and every request identical

Logits: each prompt's last token as a 1-row decode step alone vs packed with the other requests' rows (4 rows
each). Tokens: greedy and pld through `generate_batch` with 4 and 16 sequences vs `generate_request` alone. The
eager and fast runners are not batch-invariant by construction, so this counts how often they stay identical; the
quantized runners must be identical everywhere.
"""

from __future__ import annotations

from multidraft.eval.bench_args import add_model_options, load_from_args


def add_arguments(parser) -> None:
    add_model_options(parser, "smollm2-135m", dtype=False)
    parser.set_defaults(runner="eager")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per task (humaneval, code_edit)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--batches", default="4,16", help="max_num_seqs values")


def run(args) -> int:
    import multidraft
    from multidraft.errors import InvalidOptionError
    from multidraft.eval.tasks import load_task

    try:                                               # checked before the model loads, not after the first runs
        sizes = [int(b) for b in args.batches.split(",") if b.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise InvalidOptionError(f"--batches takes positive integers separated by commas (e.g. 4,16), got "
                                 f"{args.batches!r}")
    for name in ("prompts", "max_new_tokens"):
        value = getattr(args, name)
        if value < 1:
            raise InvalidOptionError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    lm = load_from_args(args, dtype="float32")
    prompts = [t.prompt or t.messages for t in load_task("humaneval", limit=args.prompts)] + \
              [t.messages for t in load_task("code_edit", limit=args.prompts)]
    diffs = logit_differences(lm, [lm.encode(p) for p in prompts])
    print(f"{lm.name} runner {lm.runner}: max |logit diff| alone vs packed ({len(diffs)} requests x 4 rows): "
          f"{max(diffs)}, identical rows: {sum(d == 0 for d in diffs)}/{len(diffs)}")
    for method in ("greedy", "pld"):
        requests = [multidraft.Request.build(p, method, max_new_tokens=args.max_new_tokens) for p in prompts]
        alone = [multidraft.generate_request(lm, r).token_ids for r in requests]
        for size in sizes:
            got = [g.token_ids for g in multidraft.generate_batch(lm, requests, max_num_seqs=size)]
            print(f"{method} batch {size}: identical {sum(a == b for a, b in zip(alone, got))}/{len(requests)}")
    return 0


def logit_differences(lm, ids: list[list[int]]) -> list[float]:
    """Per prompt: max |logit difference| of its last token computed alone vs inside one packed forward."""
    from multidraft.models.kv_cache import KVCache
    from multidraft.models.packed import KVArena, Segment, packed_forward

    arena = KVArena(sum(len(i) + 64 for i in ids))
    caches = []
    for i in ids:
        cache = arena.allocate(len(i) + 64)
        packed_forward(lm, arena, [Segment(cache, i[:-1], None, False)])
        caches.append(cache)
    alone = [lm.forward(KVCache(), i).logits[-1] for i in ids]
    out = packed_forward(lm, arena, [Segment(c, [i[-1]] * 4) for c, i in zip(caches, ids)])
    return [float((o.logits[0] - a).abs().max()) for o, a in zip(out, alone)]
