"""Why a lossless row of a bf16 bench run can differ from HF greedy: the logits at the first differing token.

    .venv/bin/python benchmarks/results/2026-11-23-cpu-bf16/bf16_divergence.py benchmarks/results/2026-11-23-cpu-bf16

Drafting methods score several tokens per forward; in bf16 a matrix product over n rows does not round exactly
like n products over one row, so where the model's two best tokens are within bf16 rounding of each other, the
argmax can flip between a 1-token and an n-token forward (HF's own prompt lookup and assisted generation flip
too). For every lossless greedy row that differs from the `hf_greedy` baseline, this script rebuilds the
context up to the first differing token and prints the two tokens' logits under one forward over that whole
context, in bf16 and in fp32: a gap near bf16's resolution (about 2^-8 of the logit's magnitude) means a numerical tie, not an
algorithmic error. The tests prove exact equality in fp32.
"""

from __future__ import annotations

import sys

import torch

import multidraft
from multidraft.eval.bench import read_results
from multidraft.eval.tasks import load_task


def first_difference(ours: list[list[int]], baseline: list[list[int]]):
    """(turn, index) of the first token where two runs differ, or None."""
    for turn, (a, b) in enumerate(zip(ours, baseline)):
        for index, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return turn, index
        if len(a) != len(b):
            return turn, min(len(a), len(b))
    return None


def main(folder: str) -> None:
    header, rows = read_results(folder)
    model = header["config"]["model"]
    limit = header["config"]["limit"]
    baseline = {(r["task"], r["prompt_id"]): r for r in rows if r["method"] == "hf_greedy"}
    differing = [r for r in rows if r["lossless"] and not r["temperature"] and r.get("equal_greedy") is False]
    if not differing:
        print("every lossless greedy row equals hf_greedy")
        return
    lms = {dtype: multidraft.load_model(model, dtype=dtype) for dtype in ("bfloat16", "float32")}
    items = {}
    for row in differing:
        if row["task"] not in items:
            items[row["task"]] = {p.id: p for p in load_task(row["task"], limit)}
        item = items[row["task"]][row["prompt_id"]]
        base = baseline[(row["task"], row["prompt_id"])]
        ours = [t["token_ids"] for t in row["turns"]]
        where = first_difference(ours, [t["token_ids"] for t in base["turns"]])
        if where is None:
            continue
        turn, index = where
        answers = [t["text"] for t in base["turns"][:turn]]
        prompt = item.input if turn == 0 else item.turn_messages(turn, answers)
        lm = lms["bfloat16"]
        ids = lm.encode(prompt) + base["turns"][turn]["token_ids"][:index]
        theirs, mine = base["turns"][turn]["token_ids"][index], ours[turn][index]
        cells = []
        for dtype, lm in lms.items():
            with torch.no_grad():
                logits = lm.model(torch.tensor([ids])).logits[0, -1].float()
            top2 = torch.topk(logits, 2)
            cells.append(f"{dtype}: logit {theirs}={logits[theirs]:.4f} {mine}={logits[mine]:.4f} "
                         f"(gap {abs(logits[theirs] - logits[mine]):.4f}; argmax {int(top2.indices[0])}, "
                         f"second {int(top2.indices[1])})")
        print(f"{row['task']} {row['prompt_id']} {row['method']}: turn {turn} token {index} "
              f"(context {len(ids)} tokens): hf_greedy {theirs!r} vs {mine!r}; " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
