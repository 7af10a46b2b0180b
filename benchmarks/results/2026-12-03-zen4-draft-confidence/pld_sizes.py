"""pld's draft size (num_draft_tokens) and n-gram size through the adaptive draft length on two cost curves.

    .venv/bin/python benchmarks/results/2026-12-03-zen4-draft-confidence/pld_sizes.py STEPS.jsonl
"""
import json
import sys
from pathlib import Path

from multidraft.drafters.prompt_lookup import PromptLookupDrafter

sys.path.insert(0, str(Path(__file__).parent))
from simulate import AMX, ZEN4, simulate  # noqa: E402


class Stand:
    eos_token_ids = [151645]


rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
for table_name, table in (("zen4", ZEN4), ("amx", AMX)):
    base = None
    for tokens in (10, 16, 32, 64):
        for ngram in (3,):
            total = dict(tokens=0, calls=0, seconds=0.0, drafted=0)
            for row in rows:
                for k, v in simulate(PromptLookupDrafter(max_ngram=ngram, num_draft_tokens=tokens), Stand(), row, None,
                                     table, "before").items():
                    total[k] += v
            base = base or total["seconds"]
            print(f"{table_name} pld {tokens:2d} tokens, max_ngram {ngram}: AAL {total['tokens'] / total['calls']:.2f} "
                  f"predicted tok/s {total['tokens'] / total['seconds']:.1f} (x{base / total['seconds']:.3f})",
                  flush=True)
