"""SuffixDecoding benchmark: suffix vs pld_plus vs pld vs HF prompt lookup vs greedy on workloads that repeat
themselves across requests, and on single-request tasks, side by side in one run.

    multidraft bench suffix --model smollm2-135m --requests 4 --max-new-tokens 64
    multidraft bench suffix --model qwen2.5-coder-1.5b --dtype bfloat16 --requests 10 --max-new-tokens 192

Workloads (deterministic, from the pulled data; requests run in order, one shared SuffixStore across the run):
- edit_module: one code_edit instruction ("add type hints") over the functions of one stdlib module in sequence;
- agent_loop: an agent that edits one function step by step, each prompt re-reading its own previous answer;
- two_turn_chat: MT-Bench questions, both turns (turn 2 holds the turn-1 answer);
- code_edit, summarize: the single-request tasks of multidraft.eval.tasks (no repetition across requests).
Each request runs every method in turn (round-robin, so load drift hits all alike); histories (earlier answers)
come from greedy, and every lossless method must reproduce greedy's tokens ("equal").
`suffix` drafts from the request and the shared store; `suffix_ctx` (opt-in) from the request alone (ablation).
tok/s = tokens / seconds summed over a workload's requests; AAL = tokens / verification calls;
draft us/tok = drafting time / drafted tokens.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict

import multidraft
from multidraft.eval.bench_args import add_model_options, load_from_args
from multidraft.eval.hf_peers import hf_prompt_lookup
from multidraft.eval.tasks import _stdlib_functions, load_task
from multidraft.eval.timing import Span
from multidraft.suffix import SuffixStore

TYPE_HINTS = "Add type hints to every parameter and to the return value of this function. Return the complete function."
AGENT_STEPS = [
    "Add type hints to every parameter and to the return value.",
    "Add a short docstring.",
    "Give the local variables clearer names.",
    "Add a comment before each block that explains it.",
    "Replace any string concatenation with f-strings, if there is any.",
    "Add an early return for invalid input.",
    "Remove the comments you added, keep everything else.",
    "Rename the function to end in _v2.",
]
REPEATED = ("edit_module", "agent_loop", "two_turn_chat")
METHODS = ("greedy", "hf_pld", "pld", "pld_plus", "suffix")


def _code_block(text: str) -> str:
    match = re.search(r"```(?:python)?\n(.*?)(```|$)", text, re.S)
    return (match.group(1) if match else text).strip()


def edit_module_requests(count: int):
    """(id, messages) for the same instruction over the functions of the module with the most of them."""
    functions = _stdlib_functions()
    by_module = defaultdict(list)
    for module, node, source in functions:
        by_module[module].append(source)
    module = max(sorted(by_module), key=lambda m: len(by_module[m]))
    for index, source in enumerate(by_module[module][:count]):
        yield f"edit_module/{module}/{index}", [{"role": "user", "content": f"{TYPE_HINTS}\n\n```python\n{source}\n```"}]


def agent_loop_prompt(code: str, step: int):
    return [{"role": "user", "content": f"You are editing a function step by step. The current code:\n\n```python\n"
                                        f"{code}\n```\n\nStep {step + 1}: {AGENT_STEPS[step % len(AGENT_STEPS)]} "
                                        "Return the complete function."}]


def run_method(lm, name, ids, max_new_tokens, store):
    if name == "hf_pld":
        tokens, seconds = hf_prompt_lookup(lm, ids, max_new_tokens)
        return {"tokens": tokens, "seconds": seconds}
    method, options = {"greedy": ("greedy", {}), "pld": ("pld", {}), "pld_plus": ("pld_plus", {}),
                       "suffix_ctx": ("suffix", {}), "suffix": ("suffix", {"store": store})}[name]
    result = multidraft.generate(lm, ids, method=method, max_new_tokens=max_new_tokens, **options)
    s = result.stats
    return {"tokens": result.token_ids, "seconds": s.total_time, "calls": s.verification_calls,
            "draft_time": s.draft_time, "drafted": s.draft_tokens_proposed, "accepted": s.draft_tokens_accepted}


def add_arguments(parser) -> None:
    add_model_options(parser, "smollm2-135m")
    parser.add_argument("--requests", type=int, default=4, help="requests per workload (chat: questions x 2 turns)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--workloads", default=",".join(REPEATED + ("code_edit", "summarize")))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--store-tokens", type=int, default=200_000)
    parser.add_argument("--out", default=None, help="write all rows as JSON here")


def run(args) -> int:
    lm = load_from_args(args)
    methods = args.methods.split(",")
    if "greedy" not in methods:
        methods.insert(0, "greedy")
    store = SuffixStore(args.store_tokens, lm=lm)
    rows = []
    clock = Span.start()

    def run_request(workload, request_id, prompt):
        ids = lm.encode(prompt)
        reference = None
        for name in methods:
            row = run_method(lm, name, ids, args.max_new_tokens, store)
            if name == "greedy":
                reference = row["tokens"]
            row.update(workload=workload, id=request_id, method=name, equal=row["tokens"] == reference,
                       n=len(row["tokens"]))
            rows.append(row)
            print(f"[{clock.elapsed():6.0f}s] {request_id:40s} {name:10s} {row['n']:4d} tok {row['seconds']:6.2f}s "
                  f"{row['n'] / row['seconds']:6.1f} tok/s equal={row['equal']}", flush=True)
        return lm.decode(reference)

    for workload in args.workloads.split(","):
        if workload == "edit_module":
            for request_id, messages in edit_module_requests(args.requests):
                run_request(workload, request_id, messages)
        elif workload == "agent_loop":
            code = _stdlib_functions()[0][2]
            for step in range(args.requests):
                answer = run_request(workload, f"agent_loop/step{step}", agent_loop_prompt(code, step))
                code = _code_block(answer) or code
        elif workload == "two_turn_chat":
            for item in load_task("chat", limit=max(1, args.requests // 2)):
                answers = []
                for turn in range(item.num_turns):
                    answers.append(run_request(workload, f"{item.id}/turn{turn + 1}", item.turn_messages(turn, answers)))
        else:
            for item in load_task(workload, limit=args.requests):
                run_request(workload, item.id, item.input)
    memory = store.describe()
    report = summarize(rows, methods, args, memory)
    print(report)
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"args": vars(args), "store": memory, "rows": [{k: v for k, v in r.items() if k != "tokens"}
                                                                      for r in rows]}, handle, indent=1)


def summarize(rows, methods, args, memory) -> str:
    lines = [f"model {args.model} ({args.dtype}, {args.threads} threads), {args.max_new_tokens} new tokens, "
             f"{args.requests} requests per workload",
             "", "| workload | method | tok/s | vs greedy | vs pld_plus | vs hf_pld | AAL | draft us/tok | equal |",
             "|---|---|---|---|---|---|---|---|---|"]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    groups = [(w, [w]) for w in workloads] + [("repeated (all)", [w for w in workloads if w in REPEATED]),
                                              ("single (all)", [w for w in workloads if w not in REPEATED])]
    for label, members in groups:
        chosen = [r for r in rows if r["workload"] in members]
        if not chosen:
            continue
        rate = {m: sum(r["n"] for r in chosen if r["method"] == m) / sum(r["seconds"] for r in chosen
                                                                          if r["method"] == m)
                for m in methods}
        for m in methods:
            sel = [r for r in chosen if r["method"] == m]
            calls = sum(r.get("calls", 0) for r in sel)
            drafted = sum(r.get("drafted", 0) for r in sel)
            aal = f"{sum(r['n'] for r in sel) / calls:.2f}" if calls else "-"
            draft_us = f"{1e6 * sum(r.get('draft_time', 0) for r in sel) / drafted:.1f}" if drafted else "-"
            ratio = lambda other: f"{rate[m] / rate[other]:.2f}x" if other in rate else "-"
            lines.append(f"| {label} | {m} | {rate[m]:.2f} | {ratio('greedy')} | {ratio('pld_plus')} | "
                         f"{ratio('hf_pld')} | {aal} | {draft_us} | {all(r['equal'] for r in sel)} |")
    lines += ["", f"suffix store after the run: {memory['tokens']} tokens in {memory['documents']} documents, "
                  f"{memory['memory_bytes'] / 1e6:.2f} MB ({memory['memory_bytes'] / max(1, memory['tokens']):.0f} "
                  f"bytes/token), bound {memory['max_tokens']} tokens",
              f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}"]
    return "\n".join(lines)

