"""Replay suffix and PLD+ on recorded greedy answers of the agent episodes under a draft-length policy and a fixed
forward-cost curve: target calls and predicted time, exactly as the loop would step (the tokens are fixed).

    .venv/bin/python benchmarks/results/2026-12-03-zen4-draft-confidence/simulate.py STEPS.jsonl [hidden.pt]

PLD+ ranks by the model's hidden states: one teacher-forced forward per step gives the same rows the loop would see
(the native runner is batch-invariant), cached in hidden.pt.
"""
import json
import sys
from pathlib import Path

import torch

import multidraft
from multidraft.decoders.draft_length import DraftLength, ForwardCosts
from multidraft.decoders.loop import _within_budget
from multidraft.drafters.base import LoopState
from multidraft.drafters.pld_plus import PLDPlusDrafter
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.models.runner import ForwardOutput
from multidraft.pldplus.calibration import default_layer
from multidraft.suffix.store import SuffixStore

ZEN4 = {1: 30.9, 2: 30.3, 3: 33.2, 4: 37.9, 5: 45.0, 6: 49.9, 7: 61.5, 8: 68.1, 9: 83.3, 12: 104.3, 16: 126.4}
AMX = {1: 30.0, 8: 39.0, 16: 48.0, 32: 80.0}        # issue 42's AMX goals: 8 rows 1.3x, 16 rows 1.6x


class Verdict:
    def __init__(self, accepted):
        self.accepted_nodes = accepted


def fixed_costs(table):
    costs = ForwardCosts()
    costs.seconds = {n: s / 1000 for n, s in table.items()}
    return costs


def price(table, n):
    points = sorted(table.items())
    for (n0, c0), (n1, c1) in zip(points, points[1:]):
        if n <= n1:
            return max(c0, c0 + (c1 - c0) * (n - n0) / (n1 - n0))
    (n0, c0), (n1, c1) = points[-2:]
    return c1 + (c1 - c0) / (n1 - n0) * (n - n1)


def accepted_path(draft, tokens, position):
    """The draft's nodes along the recorded answer from `position` on (greedy's tokens are fixed): what a verify
    accepts."""
    accepted, parent = [], -1
    while position + len(accepted) < len(tokens):
        wanted = tokens[position + len(accepted)]
        child = next((i for i in range(len(draft)) if draft.parents[i] == parent
                      and draft.token_ids[i] == wanted), None)
        if child is None:
            break
        accepted.append(child)
        parent = child
    return accepted


def simulate(drafter, lm, row, hidden, table, policy_kind, max_new_tokens=256, rates=None):
    """policy_kind: "fixed" (every drafted token verified), "before" (the policy before match classes: a depth
    asked for first, the request's own rates), "adaptive" (match_classes.patch applied: full budget, cut by the
    draft's match class), "landed" (the loop's policy since: the full budget asked for, the draft cut by the
    request's rates; 2026-12-07-zen4-tree-cut), "oracle" (only the accepted path priced: the best any cut could
    do)."""
    prompt, tokens = list(row["prompt_ids"]), list(row["tokens"])
    seq = list(prompt)
    state = LoopState(seq=seq, prompt_length=len(seq), lm=lm, sampler=None, stats=None)
    drafter.begin(state, ForwardOutput(logits=torch.empty(0), hidden=None if hidden is None
                                       else hidden[:len(prompt) - 1]))
    policy = None
    if policy_kind != "fixed":     # rates: only with match_classes.patch applied
        policy = DraftLength(fixed_costs(table), **({} if rates is None else {"rates": rates}))
    position, calls, seconds, drafted = 0, 0, 0.0, 0
    while position < len(tokens):
        remaining = max_new_tokens - position
        budget = remaining - 1
        if policy is not None and budget > 0 and policy_kind == "before":
            budget = policy.request_depth(budget)
        draft = drafter.propose(state, budget) if budget > 0 else multidraft.types.Draft()
        draft = _within_budget(draft, budget)
        if policy is not None and policy_kind in ("before", "adaptive", "landed"):
            if policy_kind == "adaptive":
                policy.consider(draft)
            draft = _within_budget(draft, policy.choose(draft.depths()))
        accepted = accepted_path(draft, tokens, position)
        if policy_kind == "oracle":       # verify just the accepted path: the best any cut could do
            rows = len(accepted) + 1
        else:
            rows = len(draft) + 1
            if policy is not None and draft.token_ids:
                policy.observe(max(draft.depths()), len(accepted))
        calls += 1
        drafted += rows - 1
        seconds += price(table, rows) / 1000
        step = min(len(accepted) + 1, len(tokens) - position)
        past = len(seq) - 1
        seq.extend(tokens[position:position + step])
        position += step
        if position < len(tokens):
            kept_rows = [0] + [node + 1 for node in accepted]
            fake = None
            if hidden is not None:
                fake = torch.zeros(len(draft) + 1, hidden.shape[1])
                for i, r in enumerate(kept_rows):
                    fake[r] = hidden[past + i]
            drafter.observe(state, draft, Verdict(accepted), ForwardOutput(logits=torch.empty(0), hidden=fake),
                            kept_rows)
    drafter.end(state)
    return dict(tokens=len(tokens), calls=calls, seconds=seconds, drafted=drafted)


def hidden_states(lm, rows, layer, path):
    if Path(path).exists():
        return torch.load(path)
    out = []
    for row in rows:
        seq = list(row["prompt_ids"]) + list(row["tokens"])
        cache = lm.new_cache()
        fo = lm.forward(cache, seq[:-1], logits_rows=slice(-1, None), hidden_layer=layer)
        out.append(fo.hidden.float().clone())
    torch.save(out, path)
    return out


def main():
    rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
    hidden_path = sys.argv[2] if len(sys.argv) > 2 else "/tmp/agentic_hidden.pt"
    lm = multidraft.load_model("qwen2.5-coder-1.5b")
    layer = default_layer(lm)
    hidden = hidden_states(lm, rows, layer, hidden_path)
    configs = {"suffix": lambda store: SuffixDrafter(lm, store=store),
               "pld_plus": lambda store: PLDPlusDrafter(lm, rank_by="hidden", layer=layer)}
    for table_name, table in (("zen4", ZEN4), ("amx", AMX)):
        for policy_kind in ("fixed", "adaptive", "oracle"):
            line = {}
            for name, make in configs.items():
                store = SuffixStore(200_000)
                total = dict(tokens=0, calls=0, seconds=0.0, drafted=0)
                for row, h in zip(rows, hidden):
                    result = simulate(make(store), lm, row, h, table, policy_kind)
                    for k in total:
                        total[k] += result[k]
                line[name] = total
            s, p = line["suffix"], line["pld_plus"]
            print(f"{table_name:5s} {policy_kind:8s} " + "  ".join(
                f"{n}: AAL {t['tokens'] / t['calls']:.2f} drafted/call {t['drafted'] / t['calls']:.1f} "
                f"tok/s {t['tokens'] / t['seconds']:.1f}" for n, t in line.items())
                + f"  suffix/pld_plus {p['seconds'] / s['seconds']:.3f}", flush=True)


if __name__ == "__main__":
    main()
