"""Is a draft's match length a predictor of how deep it is accepted? Suffix (alpha 2, 64 tokens, full drafts verified)
and PLD+ on the validation steps: per match-length bucket, steps, mean accepted, and survival S_d = P(accepted >= d)."""
import json
import sys
from collections import defaultdict
from pathlib import Path

import multidraft
from multidraft.drafters.pld_plus import PLDPlusDrafter
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.pldplus.calibration import default_layer
from multidraft.suffix.store import SuffixStore

sys.path.insert(0, str(Path(__file__).parent))
import simulate as sim  # noqa: E402

rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
lm = multidraft.load_model("qwen2.5-coder-1.5b")
layer = default_layer(lm)
hidden = sim.hidden_states(lm, rows, layer, sys.argv[2])


def agreement(seq, source, limit=64):
    n = 0
    while n < limit and source - n >= 0 and seq[source - n] == seq[len(seq) - 1 - n] and source - n != len(seq) - 1 - n:
        n += 1
    return n


def bucket(m):
    return 0 if m <= 0 else min(7, m.bit_length())       # 1, 2-3, 4-7, 8-15, 16-31, 32-63, 64-127, 128+


records = defaultdict(list)
original = sim.simulate


class Recorder:
    def __init__(self, inner, name):
        self.inner, self.name = inner, name
        self.hidden_layer = getattr(inner, "hidden_layer", None)

    def __getattr__(self, attr):
        return getattr(self.inner, attr)

    def propose(self, state, max_tokens):
        draft = self.inner.propose(state, max_tokens)
        if draft.token_ids:
            m = draft.notes.get("match_length")
            if m is None:
                m = agreement(state.seq, draft.notes["source"])
            self.pending = (m, draft.notes.get("source"), draft)
            self.state = state
            self.before = len(state.seq)
        else:
            self.pending = None
        return draft

    def observe(self, state, draft, verdict, fo, kept):
        if self.pending is not None:
            m, source, d = self.pending
            records[(self.name, source if self.name == "suffix" else "prompt")].append(
                (m, len(verdict.accepted_nodes), max(d.depths())))
        self.inner.observe(state, draft, verdict, fo, kept)


store = SuffixStore(200_000)
for row, h in zip(rows, hidden):
    sim.simulate(Recorder(SuffixDrafter(lm, store=store, alpha=2, max_draft_tokens=64), "suffix"), lm, row, h,
                 sim.ZEN4, "fixed")
    sim.simulate(Recorder(PLDPlusDrafter(lm, rank_by="hidden", layer=layer, short_draft_tokens=16), "pld_plus"),
                 lm, row, h, sim.ZEN4, "fixed")
for key, recs in sorted(records.items()):
    by = defaultdict(list)
    for m, a, d in recs:
        by[bucket(m)].append((a, d))
    print(key)
    for b, items in sorted(by.items()):
        lo = 0 if b == 0 else 2 ** (b - 1)
        surv = [sum(a >= d for a, _ in items) / len(items) for d in (1, 2, 4, 8, 16)]
        print(f"  match >= {lo:3d}: steps {len(items):4d} mean accepted {sum(a for a, _ in items) / len(items):5.2f}"
              f" mean drafted {sum(d for _, d in items) / len(items):5.1f}  S1,2,4,8,16 = "
              + " ".join(f"{s:.2f}" for s in surv))
