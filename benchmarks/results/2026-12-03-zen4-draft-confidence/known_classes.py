"""What could a draft-length policy that knew each match class's true acceptance get? The survival S_d of each
(drafter, match bucket) measured on all the steps (every draft verified whole), then every draft cut by it against
the cost curve (an in-sample bound: it knows the answers' statistics), beside the policy as landed and the oracle.

    .venv/bin/python benchmarks/results/2026-12-03-zen4-draft-confidence/known_classes.py STEPS.jsonl HIDDEN.pt STORE
"""
import json
import sys
from collections import defaultdict
from pathlib import Path

import multidraft
from multidraft.decoders.loop import _within_budget
from multidraft.drafters.pld_plus import PLDPlusDrafter
from multidraft.drafters.prompt_lookup import PromptLookupDrafter
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.pldplus.calibration import default_layer
from multidraft.suffix.store import SuffixStore

sys.path.insert(0, str(Path(__file__).parent))
import simulate as sim  # noqa: E402

rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
lm = multidraft.load_model("qwen2.5-coder-1.5b")
layer = default_layer(lm)
hidden = sim.hidden_states(lm, rows, layer, sys.argv[2])
shared = sys.argv[3] == "shared"


def agreement(seq, start, limit=64):
    end, n = len(seq), 0
    while n < limit and start - n > 0 and seq[start - 1 - n] == seq[end - 1 - n]:
        n += 1
    return n


def bucket(m):
    return min(7, max(0, m).bit_length())


class Classed:
    """Wraps a drafter: notes each draft's match bucket (PLD / PLD+: the agreement before the copied span)."""

    def __init__(self, inner):
        self.inner = inner
        self.hidden_layer = getattr(inner, "hidden_layer", None)
        self.cuttable = True

    def begin(self, state, out):
        self.inner.begin(state, out)

    def end(self, state):
        self.inner.end(state)

    def observe(self, *args):
        self.inner.observe(*args)

    def propose(self, state, max_tokens):
        draft = self.inner.propose(state, max_tokens)
        if draft.token_ids:
            m = draft.notes.get("match_length")
            if m is None:
                source = draft.notes.get("source")
                if source is not None:
                    m = agreement(state.seq, source + 1)
                else:        # pld: find the copied span by its tokens
                    seq = state.seq
                    m = 0
                    for start in range(len(seq) - 1):
                        if seq[start:start + len(draft.token_ids)] == draft.token_ids:
                            m = max(m, agreement(seq, start))
            draft.notes["bucket"] = bucket(m)
        return draft


class Known:
    """Cuts each draft by its class's measured survival (depth 0..64) and the cost curve."""

    def __init__(self, survival, table):
        self.survival, self.table = survival, table

    def choose(self, draft):
        if not draft.token_ids:
            return draft
        s = self.survival.get(draft.notes["bucket"])
        if s is None:
            return draft
        depth_max = max(draft.depths())
        best, best_value, expected = 0, 1.0 / sim.price(self.table, 1), 1.0
        for d in range(1, depth_max + 1):
            expected += s[d] if d < len(s) else 0.0
            value = expected / sim.price(self.table, d + 1)
            if value > best_value:
                best, best_value = d, value
        return _within_budget(draft, best)


def run(make, table, kind, survival=None, record=None):
    store = SuffixStore(200_000) if shared else None
    total = defaultdict(float)
    for row, h in zip(rows, hidden):
        drafter = Classed(make(store))
        if kind == "known":
            original = drafter.propose
            policy = Known(survival, table)
            drafter.propose = lambda state, budget, original=original: policy.choose(original(state, budget))
            r = sim.simulate(drafter, lm, row, h, table, "fixed")
        elif kind == "record":
            original_observe = drafter.observe
            last = {}
            original = drafter.propose

            def propose(state, budget, original=original):
                last["draft"] = original(state, budget)
                return last["draft"]

            def observe(state, draft, verdict, fo, kept, original_observe=original_observe):
                if draft.token_ids:
                    record[draft.notes["bucket"]].append(len(verdict.accepted_nodes))
                original_observe(state, draft, verdict, fo, kept)

            drafter.propose, drafter.observe = propose, observe
            r = sim.simulate(drafter, lm, row, h, table, "fixed")
        else:
            r = sim.simulate(drafter, lm, row, h, table, kind)
        for k, v in r.items():
            total[k] += v
    return total


makers = {"pld": lambda s: PromptLookupDrafter(num_draft_tokens=64),
          "pld_plus": lambda s: PLDPlusDrafter(lm, rank_by="hidden", layer=layer, num_draft_tokens=64,
                                               short_draft_tokens=64),
          "suffix": lambda s: SuffixDrafter(lm, store=s)}
for name, make in makers.items():
    accepted = defaultdict(list)
    run(make, sim.ZEN4, "record", record=accepted)
    survival = {b: [1.0] + [sum(a >= d for a in acc) / len(acc) for d in range(1, 65)] for b, acc in accepted.items()}
    for table_name, table in (("zen4", sim.ZEN4), ("amx", sim.AMX)):
        line = []
        for kind in ("before", "known", "oracle"):
            t = run(make, table, kind, survival)
            line.append(f"{kind} {t['tokens'] / t['seconds']:.1f} (AAL {t['tokens'] / t['calls']:.2f})")
        print(f"{table_name} {name:9s} " + "  ".join(line), flush=True)
