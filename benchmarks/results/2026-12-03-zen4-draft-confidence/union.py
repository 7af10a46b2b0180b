"""Ceiling of a drafter that merges suffix's tree and PLD+'s chain into one tree (oracle cut: only the accepted path
is priced), against each alone."""
import json
import sys
from pathlib import Path

import multidraft
from multidraft.drafters.base import Drafter
from multidraft.drafters.pld_plus import PLDPlusDrafter
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.pldplus.calibration import default_layer
from multidraft.suffix.store import SuffixStore
from multidraft.types import Draft

sys.path.insert(0, str(Path(__file__).parent))


def match_rates():
    """A fresh MatchRates where match_classes.patch is applied, else None (the policy as landed)."""
    from multidraft.decoders import draft_length
    return draft_length.MatchRates() if hasattr(draft_length, "MatchRates") else None


from simulate import AMX, ZEN4, hidden_states, simulate  # noqa: E402


def merge(first: Draft, second: Draft) -> Draft:
    """One tree holding both drafts' paths (shared prefixes once)."""
    tokens, parents = list(first.token_ids), list(first.parents)
    children = {}
    for i, (t, p) in enumerate(zip(tokens, parents)):
        children[(p, t)] = i
    mapping = {}
    for i, (t, p) in enumerate(zip(second.token_ids, second.parents)):
        parent = mapping[p] if p >= 0 else -1
        key = (parent, t)
        if key not in children:
            tokens.append(t)
            parents.append(parent)
            children[key] = len(tokens) - 1
        mapping[i] = children[key]
    return Draft(tokens, parents)


class Union(Drafter):
    cuttable = True

    def __init__(self, parts):
        self.parts = parts
        self.hidden_layer = next((p.hidden_layer for p in parts if getattr(p, "hidden_layer", None)), None)

    def begin(self, state, prefill_output):
        for p in self.parts:
            p.begin(state, prefill_output)

    def propose(self, state, max_tokens):
        draft = Draft()
        for p in self.parts:
            draft = merge(draft, p.propose(state, max_tokens))
        return draft

    def observe(self, state, draft, verdict, forward_output, kept_rows):
        for p in self.parts:
            p.observe(state, draft, verdict, forward_output, kept_rows)   # PLD+'s copying flag: approximate

    def end(self, state):
        for p in self.parts:
            p.end(state)


rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
lm = multidraft.load_model("qwen2.5-coder-1.5b")
layer = default_layer(lm)
hidden = hidden_states(lm, rows, layer, sys.argv[2])
makers = {
    "pld_plus": lambda s: PLDPlusDrafter(lm, rank_by="hidden", layer=layer),
    "pld_plus_16": lambda s: PLDPlusDrafter(lm, rank_by="hidden", layer=layer, short_draft_tokens=16),
    "suffix_a2": lambda s: SuffixDrafter(lm, store=s, alpha=2, max_draft_tokens=64),
    "union": lambda s: Union([SuffixDrafter(lm, store=s, alpha=2, max_draft_tokens=64),
                              PLDPlusDrafter(lm, rank_by="hidden", layer=layer)]),
    "union_16": lambda s: Union([SuffixDrafter(lm, store=s, alpha=2, max_draft_tokens=64),
                              PLDPlusDrafter(lm, rank_by="hidden", layer=layer, short_draft_tokens=16)]),
}
for policy in sys.argv[3].split(","):
    for table_name, table in (("zen4", ZEN4), ("amx", AMX)):
        for name, make in makers.items():
            store, rates = SuffixStore(200_000), match_rates()
            total = dict(tokens=0, calls=0, seconds=0.0, drafted=0)
            per_task = {}
            for row, h in zip(rows, hidden):
                r = simulate(make(store), lm, row, h, table, policy, rates=rates)
                for k in total:
                    total[k] += r[k]
                t = per_task.setdefault(row["task"], [0, 0])
                t[0] += r["tokens"]; t[1] += r["calls"]
            print(f"{policy} {table_name} {name:12s} AAL {total['tokens'] / total['calls']:.2f} "
                  f"tok/s {total['tokens'] / total['seconds']:.1f} "
                  + " ".join(f"{k}:{a / c:.2f}" for k, (a, c) in per_task.items()), flush=True)
