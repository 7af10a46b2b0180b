"""In-process A/B of suffix's old knobs (alpha 0.5, 32 tokens) against the new defaults (alpha 2, 64), pld_plus beside,
on recorded agent-episode steps: each step's prompt run by every arm in a rotating order, each arm with its own
suffix store and prefix cache; every output checked equal to the recorded greedy answer.

    .venv/bin/python benchmarks/results/2026-12-03-zen4-draft-confidence/ab_alpha.py STEPS.jsonl
"""
import json
import sys
import time
from pathlib import Path

import multidraft
import torch
from multidraft.suffix.store import SuffixStore

rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b")
arms = {"suffix_old": dict(method="suffix", alpha=0.5, max_draft_tokens=32),
        "suffix_new": dict(method="suffix"),
        "pld_plus": dict(method="pld_plus")}
stores = {name: SuffixStore(200_000) for name, arm in arms.items() if arm["method"] == "suffix"}
caches = {name: multidraft.PrefixCache(512) for name in arms}
totals = {name: [0, 0.0, 0] for name in arms}
multidraft.generate(lm, rows[0]["prompt_ids"], method="greedy", max_new_tokens=8)      # warm-up
for index, row in enumerate(rows):
    names = list(arms)
    names = names[index % len(names):] + names[:index % len(names)]
    line = []
    for name in names:
        options = dict(arms[name])
        if name in stores:
            options["store"] = stores[name]
        started = time.perf_counter()
        gen = multidraft.generate(lm, row["prompt_ids"], max_new_tokens=256, prefix_cache=caches[name], **options)
        seconds = time.perf_counter() - started
        assert list(gen.token_ids) == list(row["tokens"]), (name, row["id"], row["step"])
        totals[name][0] += len(gen.token_ids)
        totals[name][1] += seconds
        totals[name][2] += gen.stats.target_calls
        line.append(f"{name} {len(gen.token_ids) / seconds:.1f} tok/s ({gen.stats.target_calls} calls)")
    print(f"{row['id']} step {row['step']}: " + ", ".join(line), flush=True)
for name, (tokens, seconds, calls) in totals.items():
    print(f"{name}: {tokens} tokens, {seconds:.1f} s, {tokens / seconds:.2f} tok/s, {calls} calls")
print(f"suffix_new / suffix_old: {totals['suffix_old'][1] / totals['suffix_new'][1]:.3f}; "
      f"suffix_new / pld_plus: {totals['pld_plus'][1] / totals['suffix_new'][1]:.3f}; "
      f"suffix_old / pld_plus: {totals['pld_plus'][1] / totals['suffix_old'][1]:.3f}")
