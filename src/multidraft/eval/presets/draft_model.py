"""Benchmark: helper-model drafting vs plain decoding vs HF assisted generation, side by side in one run.

    multidraft bench draft_model [--prompts 3] [--max-new-tokens 64] [--threads 2]
        [--dtype float32] [--num-draft-tokens 4] [--methods greedy,hf_assisted,speculative,multi_draft2,multi_draft3]
        [--temperature 0] [--json out.json]

Target --model (qwen2.5-coder-1.5b), draft --draft (qwen2.5-coder-0.5b, the same tokenizer), HumanEval prompts (raw code completion).
Every method runs on the same prompts in the same process; tok/s = generated tokens / wall time of the decode
(prefill included), speedup is against `greedy` measured in this run, mean acceptance length = generated tokens /
target verification calls (for HF: target forwards after the prefill, counted with a hook). At temperature 0 each
method's output is compared with greedy's. The machine's load average is printed: it is shared.

Method names: greedy, hf_assisted (HF generate(assistant_model=...), its default schedule), speculative
[_L<draft length>][_stop<stop_below>][_adaptive] (e.g. speculative_L12_stop0.4), multi_draftK (K drafts: draft 1 greedy, the others sampled at T=1, SpecInfer selection),
multi_draftK_iid (K drafts all sampled at T=1), mtad; a ":SCHEME" suffix picks the selection scheme of a
multi_draft row (e.g. multi_draft4_iid:is_lp_truncated; spectr needs _iid). At T > 0 the table's acceptance
length is the block efficiency of each scheme.
"""

from __future__ import annotations

import json
import os
import re

import multidraft
from multidraft.data import load_humaneval
from multidraft.errors import InvalidOptionError
from multidraft.eval.bench_args import add_model_argument, add_model_options, load_from_args
from multidraft.eval.bench_run import hf_peer_model
from multidraft.eval.hf_peers import hf_generate


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def hf_assisted(target, draft, prompt_ids, max_new_tokens):
    calls = {"n": 0}
    hook = hf_peer_model(target).register_forward_hook(lambda *args: calls.__setitem__("n", calls["n"] + 1))
    try:
        ids, seconds = hf_generate(target, prompt_ids, max_new_tokens, assistant_model=hf_peer_model(draft))
    finally:
        hook.remove()
    return ids, seconds, len(ids) / max(1, calls["n"] - 1)


def method_options(name, draft, num_draft_tokens):
    common = {"draft_model": draft, "num_draft_tokens": num_draft_tokens}
    spec = re.fullmatch(r"speculative(?:_L(\d+))?(?:_stop([\d.]+))?(_adaptive)?", name)
    if spec:
        length, stop, adaptive = spec.groups()
        return "speculative", common | {"num_draft_tokens": int(length or num_draft_tokens),
                                        "stop_below": float(stop or 0.0), "adaptive": bool(adaptive)}
    if name.startswith("multi_draft"):
        rest, _, selection = name.removeprefix("multi_draft").partition(":")
        iid = rest.endswith("_iid")
        num_drafts = int(rest.removesuffix("_iid"))
        temperatures = [1.0] * num_drafts if iid else [0.0] + [1.0] * (num_drafts - 1)
        return "multi_draft", common | {"num_drafts": num_drafts, "draft_temperatures": temperatures,
                                        "selection": selection or "specinfer"}
    if name == "mtad":
        return "mtad", common | {"num_beams": 4}
    if name == "greedy":
        return "greedy", {}
    raise InvalidOptionError(f"unknown draft_model method {name!r}: see `multidraft bench draft_model --help`")


def add_arguments(parser) -> None:
    add_model_options(parser, "qwen2.5-coder-1.5b")
    add_model_argument(parser, "qwen2.5-coder-0.5b", "draft model (same tokenizer)", flag="--draft")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--num-draft-tokens", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--methods", default="greedy,hf_assisted,speculative,multi_draft2,multi_draft3")
    parser.add_argument("--json", default=None)


def run(args) -> int:
    target, draft = load_from_args(args), load_from_args(args, args.draft)
    problems = load_humaneval()[: args.prompts]
    prompts = [target.encode(p["prompt"]) for p in problems]
    methods = args.methods.split(",")
    print(f"target {target.name} + draft {draft.name}, {args.dtype}, {args.threads} threads, "
          f"{len(prompts)} HumanEval prompts ({[len(p) for p in prompts]} tokens), {args.max_new_tokens} new tokens, "
          f"T={args.temperature}, L={args.num_draft_tokens}; load average {load_average()}")
    for lm in (target, draft):   # warm-up: first-call allocations and kernel selection
        multidraft.generate(lm, prompts[0], max_new_tokens=4)

    results = {name: {"tokens": 0, "seconds": 0.0, "verify_calls": 0, "equal": 0, "draft_calls": 0, "mal": []}
               for name in methods}
    greedy_outputs = {}
    for index, prompt_ids in enumerate(prompts):
        for name in methods:
            if name == "hf_assisted":
                ids, seconds, mal = hf_assisted(target, draft, prompt_ids, args.max_new_tokens)
                verify_calls = round(len(ids) / mal) if mal else 0
                draft_calls = 0
            else:
                method, options = method_options(name, draft, args.num_draft_tokens)
                kwargs = {"temperature": args.temperature, "seed": index} if method != "greedy" else {}
                if method == "greedy" and args.temperature > 0:
                    method, kwargs = "sample", {"temperature": args.temperature, "seed": index}
                out = multidraft.generate(target, prompt_ids, method=method, max_new_tokens=args.max_new_tokens,
                                          **options, **kwargs)
                ids, seconds = out.token_ids, out.stats.total_time
                verify_calls, draft_calls = out.stats.verification_calls, out.stats.draft_calls
            if name == "greedy":
                greedy_outputs[index] = ids
            row = results[name]
            row["tokens"] += len(ids)
            row["seconds"] += seconds
            row["verify_calls"] += verify_calls
            row["draft_calls"] += draft_calls
            row["equal"] += int(ids == greedy_outputs.get(index))
            print(f"  prompt {index} {name:>22}: {len(ids)} tokens {seconds:6.1f}s "
                  f"{len(ids) / seconds:5.2f} tok/s, acceptance length {len(ids) / max(1, verify_calls):.2f}, "
                  f"same as greedy: {ids == greedy_outputs.get(index)}  (load {load_average()})", flush=True)

    base = results.get("greedy")
    base_rate = base["tokens"] / base["seconds"] if base else None
    print(f"\nload average at the end: {load_average()}")
    print(f"{'method':>22} | tok/s | speedup vs greedy | mean acceptance length | draft calls | output == greedy")
    for name, row in results.items():
        rate = row["tokens"] / row["seconds"]
        mal = row["tokens"] / max(1, row["verify_calls"])
        speedup = f"{rate / base_rate:.2f}x" if base_rate else "-"
        equal = f"{row['equal']}/{len(prompts)}" if args.temperature == 0 else "n/a (T>0)"
        print(f"{name:>22} | {rate:5.2f} | {speedup:>17} | {mal:22.2f} | {row['draft_calls']:11d} | {equal}")
        row.update(tokens_per_second=rate, mean_acceptance_length=mal)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"args": vars(args), "results": results}, handle, indent=1)

