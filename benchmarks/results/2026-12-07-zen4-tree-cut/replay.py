"""Replay `suffix` on recorded greedy answers of the agent episodes (the tokens of a lossless method are greedy's,
fixed in advance) under several ways of cutting its draft tree, priced with a forward-cost curve: target calls and
predicted tok/s, exactly as the loop would step.

    .venv/bin/python benchmarks/results/2026-12-07-zen4-tree-cut/replay.py STEPS.jsonl CUT[,CUT...] [MIN_PROB,...]

CUT: "depth" (the landed policy: DraftLength.choose over the draft's depths), "topN" (the first N nodes of the
best-first tree, every step). MIN_PROB: suffix's min_token_prob (0.7, the default, drafts chains; lower, trees).
"""
import json
import sys
from pathlib import Path

import torch

import multidraft
from multidraft.decoders.draft_length import DraftLength, ForwardCosts
from multidraft.decoders.loop import _within_budget
from multidraft.drafters.base import LoopState
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.models.runner import ForwardOutput
from multidraft.suffix.store import SuffixStore
from multidraft.types import Draft

# ms per forward of n rows: this Zen 4's native forward (forward-cost, 2026-12-07: 1 / 8 / 16 rows 35.5 / 49.9 /
# 95.9; 2026-12-03's curve in between) and issue 42's AMX goal (8 rows 1.3x, 16 rows 1.6x; 32 rows as measured on
# the Xeon, 3.3x)
ZEN4 = {1: 30.9, 2: 30.3, 3: 33.2, 4: 37.9, 5: 45.0, 6: 49.9, 7: 61.5, 8: 68.1, 9: 83.3, 12: 104.3, 16: 126.4,
        32: 250.0}
AMX = {1: 30.0, 8: 39.0, 16: 48.0, 32: 99.0, 64: 200.0}
CURVES = {"zen4": ZEN4, "amx": AMX}


def price(table, n):
    points = sorted(table.items())
    for (n0, c0), (n1, c1) in zip(points, points[1:]):
        if n <= n1:
            return max(c0, c0 + (c1 - c0) * (n - n0) / (n1 - n0))
    (n0, c0), (n1, c1) = points[-2:]
    return c1 + (c1 - c0) / (n1 - n0) * (n - n1)


def fixed_costs(table):
    costs = ForwardCosts()
    costs.seconds = {n: price(table, n) / 1000 for n in range(1, 129)}
    return costs


class Verdict:
    def __init__(self, accepted):
        self.accepted_nodes = accepted


def first_nodes(draft: Draft, n: int) -> Draft:
    """The first n nodes of a best-first tree (parents come first, so a subtree)."""
    return Draft(draft.token_ids[:n], draft.parents[:n], None, dict(draft.notes))


def simulate(lm, store, row, table, cut, min_prob, max_new_tokens=256):
    drafter = SuffixDrafter(lm, store=store, min_token_prob=min_prob)
    prompt, tokens = list(row["prompt_ids"]), list(row["tokens"])
    seq = list(prompt)
    state = LoopState(seq=seq, prompt_length=len(seq), lm=lm, sampler=None, stats=None)
    drafter.begin(state, ForwardOutput(logits=torch.empty(0), hidden=None))
    policy = DraftLength(fixed_costs(table)) if cut == "depth" else None
    position, calls, seconds, drafted = 0, 0, 0.0, 0
    while position < len(tokens):
        budget = max_new_tokens - position - 1
        draft = drafter.propose(state, budget) if budget > 0 else Draft()
        draft = _within_budget(draft, budget)
        if cut == "depth":
            draft = _within_budget(draft, policy.choose(draft.depths()))
        elif cut.startswith("top"):
            draft = first_nodes(draft, int(cut[3:]))
        accepted, parent = [], -1
        while position + len(accepted) < len(tokens):
            wanted = tokens[position + len(accepted)]
            child = next((i for i in range(len(draft)) if draft.parents[i] == parent
                          and draft.token_ids[i] == wanted), None)
            if child is None:
                break
            accepted.append(child)
            parent = child
        rows = len(draft) + 1
        if policy is not None and draft.token_ids:
            policy.observe(max(draft.depths()), len(accepted))
        calls += 1
        drafted += rows - 1
        seconds += price(table, rows) / 1000
        step = min(len(accepted) + 1, len(tokens) - position)
        seq.extend(tokens[position:position + step])
        position += step
        if position < len(tokens):
            drafter.observe(state, draft, Verdict(accepted), ForwardOutput(logits=torch.empty(0), hidden=None),
                            [0] + [node + 1 for node in accepted])
    drafter.end(state)
    return dict(tokens=len(tokens), calls=calls, seconds=seconds, drafted=drafted)


def run(lm, rows, table, cut, min_prob):
    store = SuffixStore(200_000)
    total = dict(tokens=0, calls=0, seconds=0.0, drafted=0)
    by_task = {}
    for row in rows:
        result = simulate(lm, store, row, table, cut, min_prob)
        for k in total:
            total[k] += result[k]
        t = by_task.setdefault(row["task"], [0, 0])
        t[0] += result["tokens"]
        t[1] += result["calls"]
    return total, {k: v[0] / v[1] for k, v in by_task.items()}


def main():
    rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
    cuts = sys.argv[2].split(",")
    probs = [float(p) for p in (sys.argv[3].split(",") if len(sys.argv) > 3 else ["0.7"])]
    lm = multidraft.load_model("qwen2.5-coder-1.5b")
    for curve, table in CURVES.items():
        for min_prob in probs:
            for cut in cuts:
                total, tasks = run(lm, rows, table, cut, min_prob)
                print(f"{curve:5s} p{min_prob:<4} {cut:7s} AAL {total['tokens'] / total['calls']:.2f} "
                      f"drafted/call {total['drafted'] / total['calls']:5.1f} tok/s "
                      f"{total['tokens'] / total['seconds']:6.1f}  "
                      + " ".join(f"{k}:{v:.2f}" for k, v in sorted(tasks.items())), flush=True)


if __name__ == "__main__":
    main()
