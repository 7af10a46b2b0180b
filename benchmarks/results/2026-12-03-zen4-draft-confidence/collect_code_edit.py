"""Greedy answers (128 tokens) of code_edit prompts as replay steps: STEPS.jsonl rows as `multidraft bench agentic
collect` writes them (prompt_ids, tokens), one episode per prompt (no store shared in the bench's code_edit rows).

    .venv/bin/python benchmarks/results/2026-12-03-zen4-draft-confidence/collect_code_edit.py SPLIT LIMIT OUT.jsonl
"""
import json
import sys

import multidraft
from multidraft.eval.tasks import load_task

split, limit, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lm = multidraft.load_model("qwen2.5-coder-1.5b")
with open(out, "w") as f:
    for item in load_task("code_edit", limit=limit, split=split):
        ids = lm.encode(item.input)
        gen = multidraft.generate(lm, ids, method="greedy", max_new_tokens=128)
        f.write(json.dumps({"task": "code_edit", "id": item.id, "step": 0, "prompt_ids": ids,
                            "tokens": list(gen.token_ids)}) + "\n")
        print(item.id, len(ids), len(gen.token_ids), flush=True)
