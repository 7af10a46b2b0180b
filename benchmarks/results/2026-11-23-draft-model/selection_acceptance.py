"""Per-token acceptance of every selection scheme on real model laws, exactly (no sampling noise).

    .venv/bin/python benchmarks/results/2026-11-23-draft-model/selection_acceptance.py [--prompts 8] [--tokens 48] [--ks 2 4] [--json out.json]

Block efficiency measured by running the decoding loop is noisy: a few hundred steps give differences of a few
percent between schemes that are within noise. This script measures the quantity the schemes differ in, one
position at a time and without sampling: along the target's own greedy continuation of HumanEval and MT-Bench
prompts, it takes the target law (qwen2.5-coder-1.5b, T = 1) and the draft law (qwen2.5-coder-0.5b, T = 1) at
every position, and computes each scheme's exact accept-branch probability with K i.i.d. drafts
(`multidraft.selection.closed_form_acceptance`), beside the optimum P* any valid rule can reach
(`optimal_acceptance`). Every scheme sees the same positions, so differences between schemes are paired.
The accept-branch probability is a lower bound of the probability that the chosen token is one of the drafts
(a residual draw can still coincide with one).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

import multidraft
from multidraft.data import load_humaneval
from multidraft.selection import closed_form_acceptance, optimal_acceptance

SCHEMES = ("specinfer", "spectr", "is", "is_lp_truncated")


def prompts_of(count: int, target) -> list[tuple[str, list[int]]]:
    from multidraft.eval.tasks import load_task

    code = [("humaneval", target.encode(p["prompt"])) for p in load_humaneval()[:count]]
    chat = [("chat", target.encode(p.input)) for p in load_task("chat", limit=count)]
    return code + chat


def laws_along_greedy(target, draft, prompt_ids: list[int], tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Target and draft next-token laws (T = 1) at each position of the target's greedy continuation."""
    continuation = multidraft.generate(target, prompt_ids, method="greedy", max_new_tokens=tokens).token_ids
    ids = prompt_ids + continuation
    rows = slice(len(prompt_ids) - 1, len(ids) - 1)
    laws = []
    for lm in (target, draft):
        with torch.no_grad():
            logits = lm.model(torch.tensor([ids])).logits[0, rows].float()
        laws.append(torch.softmax(logits, dim=-1).double())
    return laws[0], laws[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per task (HumanEval, MT-Bench turn 1)")
    parser.add_argument("--tokens", type=int, default=48, help="positions per prompt")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = multidraft.load_model("qwen2.5-coder-1.5b", dtype=args.dtype)
    draft = multidraft.load_model("qwen2.5-coder-0.5b", dtype=args.dtype)
    vocab = min(target.vocab_size, draft.vocab_size)
    values: dict[str, dict[str, list[float]]] = {}
    start = time.perf_counter()
    for task, prompt_ids in prompts_of(args.prompts, target):
        target_laws, draft_laws = laws_along_greedy(target, draft, prompt_ids, args.tokens)
        for target_row, draft_row in zip(target_laws, draft_laws):
            target_row = target_row[:vocab] / target_row[:vocab].sum()   # the padded vocabulary tail has no mass
            draft_row = draft_row[:vocab] / draft_row[:vocab].sum()
            for num_drafts in args.ks:
                drafts = draft_row.expand(num_drafts, -1)
                cell = values.setdefault(f"{task}/K={num_drafts}", {})
                for scheme in SCHEMES:
                    cell.setdefault(scheme, []).append(closed_form_acceptance(scheme, drafts, target_row))
                cell.setdefault("optimal P*", []).append(optimal_acceptance(drafts, target_row))
            values.setdefault(f"{task}/K=1", {}).setdefault("speculative", []).append(
                closed_form_acceptance("speculative", draft_row[None], target_row))
        print(f"{task}: {len(target_laws)} positions ({time.perf_counter() - start:.0f} s)", flush=True)

    summary = {key: {scheme: statistics.fmean(v) for scheme, v in cell.items()} for key, cell in values.items()}
    positions = {key: len(next(iter(cell.values()))) for key, cell in values.items()}
    print(f"\nmean accept-branch probability per position (target {target.name}, draft {draft.name}, T = 1, "
          f"i.i.d. drafts, {args.dtype})")
    for key in sorted(summary):
        row = "  ".join(f"{scheme} {value:.4f}" for scheme, value in summary[key].items())
        print(f"{key:>14} ({positions[key]} positions): {row}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "positions": positions, "mean": summary, "per_position": values},
                      handle)


if __name__ == "__main__":
    main()
