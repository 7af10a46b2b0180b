"""Greedy and prompt lookup: multidraft vs HF generate() on the same prompts, side by side, in one run.

    multidraft bench foundation --model qwen2.5-coder-1.5b --prompts 3 --max-new-tokens 64

Prompts are code edits of CPython standard-library functions (the answer copies most of the input). Methods are
interleaved per prompt so machine drift hits all alike; a warm-up runs first. Prints per-prompt rows and a summary
with tok/s, speedup over HF greedy (min / median / max), mean acceptance length and equality with greedy.
"""

from __future__ import annotations

import inspect
import json
import os
import statistics

import multidraft
from multidraft.eval.bench_args import add_model_options, load_from_args
from multidraft.eval.hf_peers import hf_generate

FUNCTIONS = ["textwrap.dedent", "shlex.quote", "fnmatch.translate", "json.encoder.py_encode_basestring",
             "calendar.isleap", "os.path.commonprefix"]
INSTRUCTIONS = ["Add type hints to this Python function.", "Add a Google-style docstring to this function.",
                "Rename every local variable to a more descriptive name."]


def code_edit_prompts(count: int) -> list[list[dict]]:
    import importlib
    prompts = []
    for index, dotted in enumerate(FUNCTIONS[:count]):
        module_name, name = dotted.rsplit(".", 1)
        source = inspect.getsource(getattr(importlib.import_module(module_name), name))
        instruction = INSTRUCTIONS[index % len(INSTRUCTIONS)]
        prompts.append([{"role": "user", "content": f"{instruction} Reply with the full function only.\n\n"
                                                    f"```python\n{source}```"}])
    return prompts


def add_arguments(parser) -> None:
    add_model_options(parser)
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--num-draft-tokens", type=int, default=10)
    parser.add_argument("--json", help="also write the rows to this JSON file")


def run(args) -> int:
    import torch
    lm = load_from_args(args)
    print(f"model {lm.name} dtype {lm.dtype} device {lm.device} threads {torch.get_num_threads()} "
          f"load average {os.getloadavg()[0]:.1f}")
    multidraft.generate(lm, "def f(x):", max_new_tokens=4)
    hf_generate(lm, lm.encode("def f(x):"), 4)
    rows = []
    for index, messages in enumerate(code_edit_prompts(args.prompts)):
        rows.append(prompt_row(lm, index, lm.encode(messages), args.max_new_tokens, args.num_draft_tokens))
        print(json.dumps(rows[-1]))
    print_summary(rows)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


def prompt_row(lm, index: int, ids: list[int], max_new_tokens: int, k: int) -> dict:
    """HF greedy, our greedy, HF prompt lookup and our pld on one prompt, interleaved."""
    row = {"prompt": index, "prompt_tokens": len(ids)}
    tokens, seconds = hf_generate(lm, ids, max_new_tokens)
    row["hf_greedy"] = {"tokens": len(tokens), "seconds": seconds, "mal": 1.0, "equal": True}
    reference = tokens
    ours = multidraft.generate(lm, ids, method="greedy", max_new_tokens=max_new_tokens)
    row["greedy"] = {"tokens": len(ours.token_ids), "seconds": ours.stats.total_time, "mal": 1.0,
                     "equal": ours.token_ids == reference}
    tokens, seconds = hf_generate(lm, ids, max_new_tokens, prompt_lookup_num_tokens=k)
    row["hf_prompt_lookup"] = {"tokens": len(tokens), "seconds": seconds, "mal": None, "equal": tokens == reference}
    ours = multidraft.generate(lm, ids, method="pld", max_new_tokens=max_new_tokens, num_draft_tokens=k)
    row["pld"] = {"tokens": len(ours.token_ids), "seconds": ours.stats.total_time,
                  "mal": ours.stats.mean_acceptance_length, "equal": ours.token_ids == reference}
    return row


def print_summary(rows: list[dict]) -> None:
    methods = ["hf_greedy", "greedy", "hf_prompt_lookup", "pld"]
    print(f"\n| method | tok/s (mean) | speedup vs HF greedy: min / median / max | mean acceptance length | "
          f"identical to HF greedy |\n|---|---|---|---|---|")
    for method in methods:
        rates = [r[method]["tokens"] / r[method]["seconds"] for r in rows]
        speedups = [r["hf_greedy"]["seconds"] / r[method]["seconds"] * r[method]["tokens"] / r["hf_greedy"]["tokens"]
                    for r in rows]
        mals = [r[method]["mal"] for r in rows if r[method]["mal"] is not None]
        mal = f"{statistics.mean(mals):.2f}" if mals else "n/a"
        equal = sum(r[method]["equal"] for r in rows)
        print(f"| {method} | {statistics.mean(rates):.2f} | {min(speedups):.2f} / {statistics.median(speedups):.2f} / "
              f"{max(speedups):.2f} | {mal} | {equal}/{len(rows)} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
