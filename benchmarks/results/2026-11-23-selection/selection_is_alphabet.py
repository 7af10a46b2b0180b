"""Classical IS's "auto" alphabet before and after the fix, exact per-token acceptance on synthetic laws.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/results/2026-11-23-selection/selection_is_alphabet.py --instances 100

Old rule: M = 40 up to K = 3, then 25 / 12 / 7 at K = 4 / 5 / 6 (K (M+1)^K <= 2e6 terms). New rule
(`classical_is_alphabet_size`): the target's support, or the largest M within the same term budget counted as the
real work. Laws: selection_laws.synthetic_logits (V = 1000), draft T 1.2, target T 1, with and without top-p 0.95.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/results/2026-11-23-selection/selection_is_alphabet.py --cost

`--cost` measures what the "auto" budgets are set from (issue #33): process CPU seconds (one thread, best of 3) to
build the classical-IS plan per counted term (`classical_is_law_cost`) and the truncated-LP plan per alphabet size,
on a flat 3,000-token law (the case where the old guessed budgets lost to SpecInfer), with the acceptance of each
default against SpecInfer and the full alphabet.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from multidraft.selection import build_plan, closed_form_acceptance
from multidraft.selection.schemes import classical_is_law_cost
from selection_laws import synthetic_logits, warp

OLD_AUTO = {2: 40, 3: 40, 4: 25, 5: 12, 6: 7}


def cpu_seconds(action, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        action()
        best = min(best, time.process_time() - start)
    return best


def measure_cost(seed: int) -> None:
    rng = np.random.default_rng(seed)
    target_logits, draft_logits = synthetic_logits(rng, vocab=3000, sharpness=(0.8, 0.8))
    target, draft = warp(target_logits, 1.0, 1.0), warp(draft_logits, 1.2, 1.0)
    others = [warp(draft_logits, t, 1.0) for t in (1.6, 1.4, 1.3)]
    for k, identical, size in [(2, True, 3000), (2, False, 3000), (3, True, 200), (3, False, 150), (4, True, 80)]:
        drafts = draft.expand(k, -1) if identical else torch.stack([draft] + others[:k - 1])
        seconds = cpu_seconds(lambda: build_plan("is", drafts, target, alphabet_size=size))
        terms = classical_is_law_cost(size + 1, k, identical)
        print(f"is K={k} {'identical' if identical else 'different'} M={size}: {seconds:.3f} s, {terms} terms, "
              f"{seconds / terms * 1e9:.1f} ns a term")
    for size in (256, 512, 1024, 2048, 3000):
        for identical in (True, False):
            drafts = draft.expand(2, -1) if identical else torch.stack([draft, others[0]])
            seconds = cpu_seconds(lambda: build_plan("is_lp_truncated", drafts, target, alphabet_size=size))
            print(f"is_lp_truncated K=2 {'identical' if identical else 'different'} M={size}: {seconds:.3f} s")
    for identical in (True, False):
        drafts = draft.expand(2, -1) if identical else torch.stack([draft, others[0]])
        cells = {name: closed_form_acceptance(scheme, drafts, target, **options) for name, scheme, options in [
            ("SpecInfer", "specinfer", {}), ("is auto", "is", {}), ("is full", "is", {"alphabet_size": None}),
            ("is_lp_truncated auto", "is_lp_truncated", {}),
            ("is_lp_truncated full", "is_lp_truncated", {"alphabet_size": None})]}
        print(f"acceptance, V = 3000, no top-p, K = 2 {'identical' if identical else 'different'}: "
              + "  ".join(f"{name} {value:.4f}" for name, value in cells.items()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cost", action="store_true", help="measure the cost the auto budgets are set from")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.cost:
        measure_cost(args.seed)
        return
    for top_p in (0.95, 1.0):
        rng = np.random.default_rng(args.seed)
        cells: dict = {}
        for _ in range(args.instances):
            target_logits, draft_logits = synthetic_logits(rng)
            target, draft = warp(target_logits, 1.0, top_p), warp(draft_logits, 1.2, top_p)
            for k in (4, 5, 6):
                drafts = draft.expand(k, -1)
                cell = cells.setdefault(k, {})
                cell.setdefault("old auto", []).append(
                    closed_form_acceptance("is", drafts, target, alphabet_size=OLD_AUTO[k]))
                cell.setdefault("new auto", []).append(closed_form_acceptance("is", drafts, target))
                cell.setdefault("SpecInfer", []).append(closed_form_acceptance("specinfer", drafts, target))
        print(f"top-p {top_p}, {args.instances} positions, V = 1000, draft T 1.2, identical drafts")
        for k, cell in cells.items():
            print(f"  K={k}: " + "  ".join(f"{name} {statistics.fmean(v):.4f}" for name, v in cell.items()))


if __name__ == "__main__":
    main()
