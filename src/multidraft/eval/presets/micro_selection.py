"""Micro-benchmark: microseconds per `multidraft.selection.select` call at vocabulary scale.

    multidraft bench micro selection [--vocab 151936] [--calls 20] [--threads 1]

Laws are LM-like: target = softmax(logits / 1.0), drafts = softmax((logits + noise) / T) with T = 1.2
(the paper's draft temperature), as float32 like a model's output. Every call builds the scheme's
plan from scratch (nothing is cached between calls), and candidates are drawn from the drafts.
'optimal_lp' is a test oracle for tiny alphabets and is not timed.
"""

from __future__ import annotations

import torch

from multidraft.eval.bench_args import THREADS_HELP, add_threads_argument, apply_threads
from multidraft.eval.timing import median_seconds
from multidraft.selection import select


def make_laws(vocab_size: int, num_drafts: int, identical: bool, seed: int):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(vocab_size, generator=generator) * 3.0
    target = torch.softmax(logits, dim=0)
    rows = []
    for draft_index in range(num_drafts):
        noise = torch.randn(vocab_size, generator=generator) * 1.0
        temperature = 1.2 if identical or draft_index == 0 else 1.6
        rows.append(torch.softmax((logits + noise) / temperature, dim=0))
        if identical:
            rows = [rows[0]] * num_drafts
            break
    return torch.stack(rows), target


def time_scheme(scheme, draft, target, calls, seed, repeats=5):
    """Median over `repeats` rounds of the mean time per call (rounds absorb timer and cache noise)."""
    generator = torch.Generator().manual_seed(seed)
    candidate_sets = [torch.multinomial(draft, 1, generator=generator).reshape(-1) for _ in range(calls)]
    for candidates in candidate_sets[:3]:  # warm-up (imports, allocator, CPU clocks)
        select(scheme, candidates, draft, target, generator=generator)
    def one_round():
        for candidates in candidate_sets:
            select(scheme, candidates, draft, target, generator=generator)
    return median_seconds(one_round, repeats, warmup=0) / calls * 1e6


def add_arguments(parser) -> None:
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--calls", type=int, default=20, help="calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per cell, the median shown")
    add_threads_argument(parser, THREADS_HELP)


def run(args) -> int:
    args.threads = apply_threads(args.threads)
    schemes = ["speculative", "specinfer", "spectr", "is", "is_lp", "is_lp_truncated"]
    print(f"V = {args.vocab}, {args.rounds} rounds of {args.calls} calls per cell (median), {args.threads} thread(s); microseconds per select() call")
    for identical in (True, False):
        print(f"\n{'identical' if identical else 'non-identical'} drafts")
        print(f"{'scheme':<17}" + "".join(f"{'K=' + str(k):>10}" for k in (1, 2, 3, 4)))
        for scheme in schemes:
            if scheme == "spectr" and not identical:
                continue
            cells = []
            for num_drafts in (1, 2, 3, 4):
                if (scheme == "speculative") != (num_drafts == 1):
                    cells.append(f"{'-':>10}")
                    continue
                draft, target = make_laws(args.vocab, num_drafts, identical, seed=num_drafts)
                micros = time_scheme(scheme, draft, target, args.calls, seed=7, repeats=args.rounds)
                cells.append(f"{micros:>10.0f}")
            print(f"{scheme:<17}" + "".join(cells))
    print("\noptimal_lp: not timed (LP over V^K tuples; test oracle for V <= 8)")

