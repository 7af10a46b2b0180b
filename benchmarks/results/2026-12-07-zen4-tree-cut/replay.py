"""Replay `suffix` on recorded greedy answers of the agent episodes (the tokens of a lossless method are greedy's,
fixed in advance) under several ways of cutting its draft tree, priced with a forward-cost curve: target calls and
predicted tok/s, exactly as the loop would step.

    .venv/bin/python benchmarks/results/2026-12-07-zen4-tree-cut/replay.py STEPS.jsonl CUT[,CUT...] [MIN_PROB,...]

CUT: "depth" (the landed policy: DraftLength.choose over the draft's depths), "topN" (the first N nodes of the
best-first tree, every step). MIN_PROB: suffix's min_token_prob (0.7, the default, drafts chains; lower, trees).
"""
import importlib.util
import json
import sys
from pathlib import Path

import multidraft
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.decoders.draft_length import ForwardCosts
from multidraft.suffix.store import SuffixStore
from multidraft.types import Draft

# ms per forward of n rows: this Zen 4's native forward (forward-cost, 2026-12-07: 1 / 8 / 16 rows 35.5 / 49.9 /
# 95.9; 2026-12-03's curve in between) and issue 42's AMX goal (8 rows 1.3x, 16 rows 1.6x; 32 rows as measured on
# the Xeon, 3.3x)
ZEN4 = {1: 30.9, 2: 30.3, 3: 33.2, 4: 37.9, 5: 45.0, 6: 49.9, 7: 61.5, 8: 68.1, 9: 83.3, 12: 104.3, 16: 126.4,
        32: 250.0}
AMX = {1: 30.0, 8: 39.0, 16: 48.0, 32: 99.0, 64: 200.0}
CURVES = {"zen4": ZEN4, "amx": AMX}


# the earlier replay's pricing and verify walk (2026-12-03-zen4-draft-confidence/simulate.py)
_spec = importlib.util.spec_from_file_location(
    "simulate", Path(__file__).parent.parent / "2026-12-03-zen4-draft-confidence" / "simulate.py")
earlier = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(earlier)
price = earlier.price


def fixed_costs(table):
    """The policy's cost table: every size 1..128 priced on the curve (the earlier fixed_costs gave its points)."""
    costs = ForwardCosts()
    costs.seconds = {n: price(table, n) / 1000 for n in range(1, 129)}
    return costs


class FirstNodes:
    """A drafter whose every draft is cut to its first n nodes (a best-first tree's parents come first: a subtree)."""

    def __init__(self, drafter, n: int):
        self.drafter, self.n = drafter, n

    def begin(self, state, output):
        self.drafter.begin(state, output)

    def propose(self, state, budget):
        draft = self.drafter.propose(state, budget)
        return Draft(draft.token_ids[:self.n], draft.parents[:self.n], None, dict(draft.notes))

    def observe(self, *args):
        self.drafter.observe(*args)

    def end(self, state):
        self.drafter.end(state)


def simulate(lm, store, row, table, cut, min_prob):
    """One step's replay: "depth" as the loop cuts today, "topN" every draft's first N nodes, all verified."""
    drafter = SuffixDrafter(lm, store=store, min_token_prob=min_prob)
    if cut == "depth":
        earlier.fixed_costs = fixed_costs
        return earlier.simulate(drafter, lm, row, None, table, "landed")
    return earlier.simulate(FirstNodes(drafter, int(cut[3:])), lm, row, None, table, "fixed")


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
