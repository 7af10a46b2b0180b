"""PLD+ benchmark: greedy vs PLD vs HF prompt lookup vs PLD+(hidden) vs PLD+(attention), side by side.

    multidraft bench pld_plus --model qwen2.5-coder-0.5b --prompts 2 --max-new-tokens 96
    multidraft bench pld_plus --k-sweep 8,16,32,70 --methods pld_plus_hidden --tasks code_edit

One model, loaded once with eager attention (PLD+(a) needs it; every method then uses the same kernel, so
outputs must be token-identical to greedy). Methods run round-robin on each prompt so load drift hits all alike.
Chat prompts run both MT-Bench turns; turn 2 contains the method's own turn-1 answer (as Spec-Bench does).
Baselines, named: `pld_reference` is the paper's PLD (n <= 3, K = 10 whole tokens, no overlap with the trailing
n-gram), `pld` is the library default (variant "hf", HF's matching rule), `hf_pld` is transformers' own generate().
Speedup = mean per-prompt tok/s of the method / that of greedy (Spec-Bench); AAL = tokens / verification calls.
`--sdpa-overhead` also times greedy on an sdpa copy of the model, to price eager attention.
"""

from __future__ import annotations

import json
import statistics

import multidraft
from multidraft.eval.bench_args import add_model_options, load_from_args
from multidraft.eval.hf_peers import hf_prompt_lookup
from multidraft.eval.tasks import INPUT_GUIDED_TASKS, load_task
from multidraft.eval.timing import Span

METHODS = {
    "greedy": ("greedy", {}),
    "pld": ("pld", {}),                                   # the library default: HF's matching rule (variant="hf")
    "pld_reference": ("pld", {"variant": "reference"}),   # the PLD+ paper's baseline (Saxena / Spec-Bench)
    "pld_plus_hidden": ("pld_plus", {"rank_by": "hidden"}),
    "pld_plus_attention": ("pld_plus", {"rank_by": "attention"}),
    "pld_plus_first": ("pld_plus", {"rank_by": "first"}),
}


def run_prompt(lm, item, name, max_new_tokens, k):
    """(tokens per turn, seconds, verification calls) for one method on one task prompt, all turns."""
    answers, token_lists, seconds, calls = [], [], 0.0, 0
    for turn in range(item.num_turns):
        prompt = item.turn_messages(turn, answers) if item.turns else item.input
        if name == "hf_pld":
            tokens, secs = hf_prompt_lookup(lm, lm.encode(prompt), max_new_tokens)
            answers.append(lm.decode(tokens))
            token_lists.append(tokens)
            seconds += secs
            continue              # HF's generate reports no call count: AAL shown as nan / "-"
        method, options = METHODS[name]
        options = dict(options)
        if method != "greedy" and k is not None:
            options["num_draft_tokens"] = k
        result = multidraft.generate(lm, prompt, method=method, max_new_tokens=max_new_tokens, **options)
        answers.append(result.text)
        token_lists.append(result.token_ids)
        seconds += result.stats.total_time
        calls += result.stats.verification_calls
    return token_lists, seconds, calls


def add_arguments(parser) -> None:
    add_model_options(parser, "qwen2.5-coder-0.5b", runner=False)   # eager attention: an HF model
    parser.add_argument("--tasks", default=",".join(INPUT_GUIDED_TASKS))
    parser.add_argument("--prompts", type=int, default=2, help="prompts per task")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--methods", default="greedy,pld_reference,pld,hf_pld,pld_plus_hidden,pld_plus_attention",
                        help="pld_reference = the paper's PLD; pld = variant 'hf'; hf_pld = transformers' own")
    parser.add_argument("--k-sweep", default=None, help="comma-separated num_draft_tokens values for the PLD+ methods")
    parser.add_argument("--sdpa-overhead", action="store_true")
    parser.add_argument("--out", default=None, help="write all rows as JSON here")


def run(args) -> int:
    lm = load_from_args(args, attn_implementation="eager")
    sdpa = load_from_args(args, runner="eager") if args.sdpa_overhead else None
    methods = args.methods.split(",")
    ks = [int(k) for k in args.k_sweep.split(",")] if args.k_sweep else [None]
    # The K sweep applies to PLD+ only; PLD keeps its own default (10, as Spec-Bench) and HF its 10.
    variants = [(m, None) for m in methods if not m.startswith("pld_plus")]
    variants += [(m, k) for m in methods if m.startswith("pld_plus") for k in ks]
    if not any(m == "greedy" for m, _ in variants):
        variants.insert(0, ("greedy", None))
    if sdpa is not None:
        variants.append(("greedy_sdpa", None))
    rows = []
    clock = Span.start()
    for task in args.tasks.split(","):
        for item in load_task(task, limit=args.prompts):
            reference = None
            for name, k in variants:
                model = sdpa if name == "greedy_sdpa" else lm
                tokens, seconds, calls = run_prompt(model, item, "greedy" if name == "greedy_sdpa" else name,
                                                    args.max_new_tokens, k)
                if name == "greedy":
                    reference = tokens
                total = sum(len(t) for t in tokens)
                rows.append({"task": task, "id": item.id, "method": name, "k": k, "tokens": total, "seconds": seconds,
                             "tok_s": total / seconds, "aal": total / calls if calls else None,
                             "equal": tokens == reference})
                print(f"[{clock.elapsed():6.0f}s] {item.id:22s} {name:20s} k={k!s:4s} {total:4d} tok "
                      f"{seconds:6.1f}s {total / seconds:6.2f} tok/s aal={rows[-1]['aal'] or float('nan'):.2f} "
                      f"equal={rows[-1]['equal']}", flush=True)
    print_table(rows, args)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"args": vars(args), "rows": rows}, handle, indent=1)


def print_table(rows, args):
    print(f"\nmodel {args.model} ({args.dtype}, {args.threads} threads), {args.max_new_tokens} new tokens, "
          f"{args.prompts} prompts/task; speedup = mean tok/s / greedy's mean tok/s")
    print(f"{'task':10s} {'method':20s} {'K':>4s} {'tok/s':>7s} {'speedup':>8s} {'AAL':>6s} {'equal':>6s}")
    tasks = list(dict.fromkeys(r["task"] for r in rows)) + ["all"]
    variants = list(dict.fromkeys((r["method"], r["k"]) for r in rows))
    for task in tasks:
        chosen = [r for r in rows if task == "all" or r["task"] == task]
        base = statistics.mean(r["tok_s"] for r in chosen if r["method"] == "greedy")
        for method, k in variants:
            sel = [r for r in chosen if (r["method"], r["k"]) == (method, k)]
            aals = [r["aal"] for r in sel if r["aal"]]
            tps = statistics.mean(r["tok_s"] for r in sel)
            aal = f"{sum(r['tokens'] for r in sel) / sum(r['tokens'] / r['aal'] for r in sel if r['aal']):.2f}" if aals else "-"
            print(f"{task:10s} {method:20s} {k if k is not None else '-':>4} {tps:7.2f} {tps / base:7.2f}x {aal:>6s} "
                  f"{all(r['equal'] for r in sel)!s:>6s}")

