"""Classical IS's "auto" alphabet before and after the fix, exact per-token acceptance on synthetic laws.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/selection_is_alphabet.py --instances 100

Old rule: M = 40 up to K = 3, then 25 / 12 / 7 at K = 4 / 5 / 6 (K (M+1)^K <= 2e6 terms). New rule
(`classical_is_alphabet_size`): the target's support, or the largest M within the same term budget counted as the
real work. Laws: selection_laws.synthetic_logits (V = 1000), draft T 1.2, target T 1, with and without top-p 0.95.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import torch

from multidraft.selection import closed_form_acceptance
from selection_laws import synthetic_logits, warp

OLD_AUTO = {2: 40, 3: 40, 4: 25, 5: 12, 6: 7}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--instances", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
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
