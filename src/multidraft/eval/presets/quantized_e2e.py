"""The quantized runner end to end, fp32 and 8-bit activations, beside llama.cpp on the same GGUF (issue 29).

    python benchmarks/quantized_e2e.py --model qwen2.5-coder-1.5b --limit 6 --max-new-tokens 128 --threads 2 \
        --out benchmarks/results/DIR

One loaded model serves both activation modes (`LM.use_runner("quantized")` / `("quantized-q8")` switch them in
place), so every row runs in one process, interleaved prompt by prompt (load drift hits every row alike):
fp32 greedy and pld; q8 greedy, pld, pld_plus, suffix; llama.cpp greedy and prompt lookup (llama-cpp-python, the
same prompt ids, threads and max tokens, prefill inside the timed span, as the bench's rows). tok/s is pooled
(tokens / seconds over all prompts); our drafting rows use the adaptive draft length (the bench's default); acceptance length = tokens / target calls that emitted tokens (the bench's mean acceptance length).
"= greedy" counts the prompts on which a row gave the very tokens of greedy in the same activation mode; the llama.cpp rows are compared with q8
greedy (the same arithmetic family) and fp32 greedy. HF rows are left out (see the bench for them): they take
longer than all of these together. Writes DIR/rows.jsonl and DIR/table.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import multidraft
from multidraft.eval import llama_cpp_peer
from multidraft.eval.bench_args import add_model_options, load_from_args
from multidraft.eval.tasks import load_task
from multidraft.eval.timing import Span

ROWS = [("quantized", "greedy"), ("quantized", "pld"), ("quantized-q8", "greedy"), ("quantized-q8", "pld"),
        ("quantized-q8", "pld_plus"), ("quantized-q8", "suffix"), ("llama.cpp", llama_cpp_peer.GREEDY),
        ("llama.cpp", llama_cpp_peer.PROMPT_LOOKUP)]
PLD_DRAFT_TOKENS = 10             # pld's default num_draft_tokens: llama.cpp's prompt lookup drafts as many


def run_row(lm, runner: str, method: str, prompt_ids: list[int], max_new: int, model: str) -> dict:
    if runner == "llama.cpp":
        options = llama_cpp_peer.peer_options(method, {}, PLD_DRAFT_TOKENS)
        llama = llama_cpp_peer.runner_for(lm, method, options, len(prompt_ids) + max_new, model)
        with Span() as span:
            tokens = llama.generate(prompt_ids, max_new, lm.eos_token_ids)
        return {"tokens": tokens, "seconds": span.seconds, "calls": None}
    lm.use_runner(runner)
    with Span() as span:
        out = multidraft.generate(lm, prompt_ids, method=method, max_new_tokens=max_new, temperature=0,
                                  draft_length="adaptive")
    seconds = span.seconds
    stats = out.stats.to_dict()
    return {"tokens": list(out.token_ids), "seconds": seconds, "calls": out.stats.verification_calls,
            "prefill_seconds": stats.get("prefill_time")}


def add_arguments(parser) -> None:
    add_model_options(parser, runner=False, dtype=False, device=False)    # GGUF blocks on the CPU, runner switched per row
    parser.add_argument("--task", default="code_edit")
    parser.add_argument("--limit", type=int, default=6)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--out", type=Path, required=True)


def run(args) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    load_start = os.getloadavg()[0]
    lm = load_from_args(args, runner="quantized")
    items = load_task(args.task, limit=args.limit)
    # Warm-up (untimed): kernels, llama.cpp contexts, allocator, on a short prompt.
    warm = lm.encode(items[0].input)[:64]
    for runner, method in ROWS:
        run_row(lm, runner, method, warm, 4, args.model)
    records = []
    with open(args.out / "rows.jsonl", "w") as sink:
        for item in items:
            prompt_ids = lm.encode(item.input)
            for runner, method in ROWS:
                row = run_row(lm, runner, method, prompt_ids, args.max_new_tokens, args.model)
                row.update(prompt=item.id, runner=runner, method=method, prompt_tokens=len(prompt_ids),
                           load=os.getloadavg()[0])
                records.append(row)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                print(f"{item.id} {runner:13s} {method:24s} {len(row['tokens']):4d} tok {row['seconds']:6.2f} s "
                      f"load {row['load']:.1f}", flush=True)
    table = summarize(records, args, load_start, os.getloadavg()[0])
    (args.out / "table.md").write_text(table)
    print(table)


def summarize(records: list[dict], args, load_start: float, load_end: float) -> str:
    by_row: dict[tuple, list[dict]] = {}
    for r in records:
        by_row.setdefault((r["runner"], r["method"]), []).append(r)
    greedy = {mode: {r["prompt"]: r["tokens"] for r in by_row[(mode, "greedy")]} for mode in ("quantized", "quantized-q8")}

    def rate(rows):
        return sum(len(r["tokens"]) for r in rows) / sum(r["seconds"] for r in rows)

    llama_greedy = rate(by_row[("llama.cpp", llama_cpp_peer.GREEDY)])
    llama_lookup = rate(by_row[("llama.cpp", llama_cpp_peer.PROMPT_LOOKUP)])
    lines = [f"{args.model}, {args.task} x {args.limit} prompts x {args.max_new_tokens} new tokens, {args.threads} "
             f"threads, load average {load_start:.1f} at the start and {load_end:.1f} at the end", "",
             "| runner | method | tok/s (pooled) | vs llama.cpp greedy | vs llama.cpp prompt lookup | acceptance length "
             "| = fp32 greedy | = q8 greedy |", "|---|---|---|---|---|---|---|---|"]
    for (runner, method), rows in by_row.items():
        tokens = sum(len(r["tokens"]) for r in rows)
        calls = [r["calls"] for r in rows if r["calls"]]
        acceptance = f"{tokens / sum(calls):.2f}" if len(calls) == len(rows) else "—"
        same = {mode: sum(r["tokens"] == greedy[mode][r["prompt"]] for r in rows) for mode in greedy}
        speed = rate(rows)
        lines.append(f"| {runner} | {method} | {speed:.2f} | {speed / llama_greedy:.2f}x | {speed / llama_lookup:.2f}x "
                     f"| {acceptance} | {same['quantized']}/{len(rows)} | {same['quantized-q8']}/{len(rows)} |")
    return "\n".join(lines) + "\n"

