"""Suffix's knobs under the adaptive policy on two cost curves (this CPU's and issue 42's AMX goal), PLD+ beside."""
import itertools
import json
import sys
from pathlib import Path

import multidraft
from multidraft.drafters.pld_plus import PLDPlusDrafter
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.pldplus.calibration import default_layer
from multidraft.suffix.store import SuffixStore

sys.path.insert(0, str(Path(__file__).parent))


def match_rates():
    """A fresh MatchRates where match_classes.patch is applied, else None (the policy as landed)."""
    from multidraft.decoders import draft_length
    return draft_length.MatchRates() if hasattr(draft_length, "MatchRates") else None


from simulate import AMX, ZEN4, hidden_states, simulate  # noqa: E402

rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
lm = multidraft.load_model("qwen2.5-coder-1.5b")
layer = default_layer(lm)
hidden = hidden_states(lm, rows, layer, sys.argv[2])
policy = sys.argv[3] if len(sys.argv) > 3 else "adaptive"


def run(make, table):
    store, rates = SuffixStore(200_000), match_rates()
    total = dict(tokens=0, calls=0, seconds=0.0, drafted=0)
    for row, h in zip(rows, hidden):
        for k, v in simulate(make(store), lm, row, h, table, policy, rates=rates).items():
            total[k] += v
    return total


for table_name, table in (("zen4", ZEN4), ("amx", AMX)):
    base = run(lambda store: PLDPlusDrafter(lm, rank_by="hidden", layer=layer), table)
    print(f"{table_name} {policy} pld_plus AAL {base['tokens'] / base['calls']:.2f} "
          f"tok/s {base['tokens'] / base['seconds']:.1f}", flush=True)
    for alpha, prob, tokens in itertools.product((0.5, 1, 2, 4), (0.7, 0.4, 0.2, 0.1), (32, 64)):
        r = run(lambda store: SuffixDrafter(lm, store=store, alpha=alpha, min_token_prob=prob,
                                            max_draft_tokens=tokens), table)
        print(f"{table_name} {policy} suffix alpha {alpha} p {prob} max {tokens}: AAL {r['tokens'] / r['calls']:.2f} "
              f"drafted/call {r['drafted'] / r['calls']:.1f} tok/s {r['tokens'] / r['seconds']:.1f} "
              f"vs pld_plus {base['seconds'] / r['seconds']:.3f}", flush=True)
