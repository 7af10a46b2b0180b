"""suffix's old knobs (alpha 0.5, 32 tokens) against the new (alpha 2, 64) beside pld and pld_plus, replayed through
today's adaptive draft length on two cost curves. STORE: "shared" (one store over the steps, in order, as the agent
bench) or "none" (the request's context only, as `multidraft bench`'s suffix row).

    .venv/bin/python benchmarks/results/2026-12-03-zen4-draft-confidence/compare.py STEPS.jsonl HIDDEN.pt STORE
"""
import json
import sys
from pathlib import Path

import multidraft
from multidraft.drafters.pld_plus import PLDPlusDrafter
from multidraft.drafters.prompt_lookup import PromptLookupDrafter
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.pldplus.calibration import default_layer
from multidraft.suffix.store import SuffixStore

sys.path.insert(0, str(Path(__file__).parent))
from simulate import AMX, ZEN4, hidden_states, simulate  # noqa: E402

rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
lm = multidraft.load_model("qwen2.5-coder-1.5b")
layer = default_layer(lm)
hidden = hidden_states(lm, rows, layer, sys.argv[2])
shared = sys.argv[3] == "shared"
makers = {"pld": lambda s: PromptLookupDrafter(),
          "pld_plus": lambda s: PLDPlusDrafter(lm, rank_by="hidden", layer=layer),
          "suffix old (0.5, 32)": lambda s: SuffixDrafter(lm, store=s, alpha=0.5, max_draft_tokens=32),
          "suffix new (2, 64)": lambda s: SuffixDrafter(lm, store=s)}
for table_name, table in (("zen4", ZEN4), ("amx", AMX)):
    base = None
    for name, make in makers.items():
        store = SuffixStore(200_000) if shared else None
        total = dict(tokens=0, calls=0, seconds=0.0, drafted=0)
        for row, h in zip(rows, hidden):
            for k, v in simulate(make(store), lm, row, h, table, "before").items():
                total[k] += v
        base = base or total["seconds"]
        print(f"{table_name} {name:22s} AAL {total['tokens'] / total['calls']:.2f} drafted/call "
              f"{total['drafted'] / total['calls']:.1f} predicted tok/s {total['tokens'] / total['seconds']:.1f} "
              f"(x{base / total['seconds']:.3f} pld)", flush=True)
