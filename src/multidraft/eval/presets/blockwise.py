"""Blockwise parallel decoding benchmark: offline block efficiency of every strategy, spec §6 analyses, and
wall-clock speed of the online loop vs greedy, on code (HumanEval) and chat (MT-Bench turn 1) prompts.

    multidraft bench blockwise --model smollm2-135m --limit 6 --max-new-tokens 64 \
        --out benchmarks/results/2026-11-22-blockwise/README.md

Block efficiency (B) = generated tokens / verification calls, pooled over the prompts of a task (the
library's mean_acceptance_length). Every strategy is evaluated offline from one greedy run plus one forward
per prompt (bpd.md §3.7); wall-clock runs use the real loop and check token equality with greedy.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import multidraft
from multidraft.blockwise import load_heads
from multidraft.blockwise.drafter import BlockwiseStrategy, NeuralScorer, NGramScorer
from multidraft.blockwise.evaluation import OfflineRun, analyse, h_max
from multidraft.eval.bench_args import add_model_options, load_from_args
from multidraft.eval.timing import Span
from multidraft.ngram.resolve import resolve_ngram


def prompts(task: str, limit: int):
    try:
        from multidraft.eval.tasks import load_task

        return [(p.id, p.input) for p in load_task(task, limit)]
    except ImportError:
        from multidraft import data

        if task == "humaneval":
            return [(p["task_id"], p["prompt"]) for p in data.load_humaneval()[:limit]]
        return [(str(q["question_id"]), [{"role": "user", "content": q["turns"][0]}]) for q in data.load_mt_bench()[:limit]]


def strategies(ngram, order, alpha, k, p, rescorer=None):
    """The strategies compared offline; "neural-local" uses `rescorer` (a smaller LM) or, without one, the n-gram."""
    local = NeuralScorer(rescorer) if rescorer is not None else NGramScorer(ngram, order)
    neural = f"neural-local ({rescorer.name}, k={k})" if rescorer is not None else f"neural-local* (k={k})"
    return {
        "none (plain BPD, k=1)": BlockwiseStrategy("none", 1, 1),
        f"none p-best (k={k}, p={p})": BlockwiseStrategy("none", k, p),
        f"ngram 1-best (k={k}, {order}-gram)": BlockwiseStrategy("ngram", k, 1, alpha, ngram, order),
        f"ngram p-best (k={k}, p={p})": BlockwiseStrategy("ngram", k, p, alpha, ngram, order),
        neural: BlockwiseStrategy("neural", k, 1, alpha, ngram, order, scorer=local),
    }


def add_arguments(ap) -> None:
    add_model_options(ap, "smollm2-135m")
    ap.add_argument("--heads", help="heads file (default: newest for the model)")
    ap.add_argument("--rescorer", help="smaller LM with the same tokenizer for neural local rescoring "
                                       "(default: the n-gram model stands in)")
    ap.add_argument("--ngram-path", help="n-gram file (default: the file of `multidraft ngram build-default`)")
    ap.add_argument("--ngram-order", type=int, default=3)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--alphas", default="0.25,0.5,1,2", help="alpha sweep for ngram 1-best (same prompts)")
    ap.add_argument("--lattice-k", type=int, default=8, help="lattice width k (top-k tokens per head)")
    ap.add_argument("--num-paths", type=int, default=4)
    ap.add_argument("--limit", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--timing-prompts", type=int, default=2, help="prompts per task for wall-clock runs")
    ap.add_argument("--out", default="/tmp/blockwise_bench.md", help="markdown tables (the committed report quotes them)")


def run(args) -> int:
    lm = load_from_args(args)
    rescorer = load_from_args(args, args.rescorer) if args.rescorer else None
    heads = load_heads(lm, args.heads)
    ngram = resolve_ngram(lm, args.ngram_path)
    strats = strategies(ngram, args.ngram_order, args.alpha, args.lattice_k, args.num_paths, rescorer)
    alphas = [float(a) for a in args.alphas.split(",") if a]
    sweep = {a: BlockwiseStrategy("ngram", args.lattice_k, 1, a, ngram, args.ngram_order) for a in alphas}
    oracle_ks = (1, 2, 4, 8, 16)
    results = {"config": vars(args), "heads": {k: v for k, v in heads.meta.items() if k != "path"},
               "ngram": str(ngram.path), "tasks": {}}
    for task in ("humaneval", "chat"):
        items = prompts(task, args.limit)
        pooled = {name: [0, 0] for name in list(strats) + [f"oracle k={k}" for k in oracle_ks]
                  + [f"alpha={a}" for a in alphas]}
        analyses, runs, clock = [], [], Span.start()
        for pid, prompt in items:
            ids = lm.encode(prompt)
            run = OfflineRun(lm, heads, ids, args.max_new_tokens)
            runs.append((pid, ids, run))
            for name, strategy in strats.items():
                r = run.run(strategy)
                pooled[name][0] += r.tokens
                pooled[name][1] += r.calls
            for a, strategy in sweep.items():
                r = run.run(strategy)
                pooled[f"alpha={a}"][0] += r.tokens
                pooled[f"alpha={a}"][1] += r.calls
            info = analyse(run, strats[f"ngram 1-best (k={args.lattice_k}, {args.ngram_order}-gram)"], oracle_ks)
            for k in oracle_ks:
                r = run.run_oracle(k)
                pooled[f"oracle k={k}"][0] += r.tokens
                pooled[f"oracle k={k}"][1] += r.calls
            analyses.append(info)
            print(f"{task} {pid}: {run.total} tokens, plain BPD B={run.run(strats['none (plain BPD, k=1)']).block_efficiency:.3f}",
                  flush=True)
        task_res = {"prompts": len(items), "offline_seconds": clock.elapsed(),
                    "block_efficiency": {n: t / c for n, (t, c) in pooled.items() if c}}
        steps = sum(a["steps"] for a in analyses)
        ent = np.sum([a["entropy_sum"] for a in analyses], 0) / max(sum(a["entropy_steps"] for a in analyses), 1)
        wtl = {key: sum(a["win_tie_loss"][key] for a in analyses) for key in analyses[0]["win_tie_loss"]}
        consec = lambda key: (float(np.average([a[key][0] for a in analyses], weights=[a["steps"] for a in analyses])),
                              float(np.average([a[key][1] for a in analyses], weights=[a["steps"] for a in analyses])))
        task_res.update(steps=steps, mean_entropy=ent.tolist(), h_max=h_max(ent.tolist()), win_tie_loss=wtl,
                        consec_vanilla=consec("consec_vanilla"), consec_rescored=consec("consec_rescored"))
        # Wall clock: the real loop vs greedy on the first prompts.
        timing = {}
        modes = {"greedy": dict(method="greedy"),
                 "blockwise none k=1": dict(method="blockwise", rescoring="none", lattice_k=1, num_paths=1),
                 f"blockwise ngram k={args.lattice_k} p=1": dict(method="blockwise", rescoring="ngram", lattice_k=args.lattice_k,
                                                              num_paths=1, ngram_order=args.ngram_order, alpha=args.alpha),
                 f"blockwise ngram k={args.lattice_k} p={args.num_paths}": dict(
                     method="blockwise", rescoring="ngram", lattice_k=args.lattice_k, num_paths=args.num_paths,
                     ngram_order=args.ngram_order, alpha=args.alpha)}
        if rescorer is not None:
            modes[f"blockwise neural k={args.lattice_k}"] = dict(method="blockwise", rescoring="neural",
                                                                  lattice_k=args.lattice_k, num_paths=1,
                                                                  rescorer=rescorer)
        for pid, ids, run in runs[:args.timing_prompts]:
            for name, opts in modes.items():
                extra = {"heads": heads, "ngram": ngram} if opts["method"] == "blockwise" else {}
                gen = multidraft.generate(lm, ids, max_new_tokens=args.max_new_tokens, **opts, **extra)
                entry = timing.setdefault(name, {"tokens": 0, "seconds": 0.0, "calls": 0, "equal": True})
                entry["tokens"] += len(gen.token_ids)
                entry["seconds"] += gen.stats.total_time
                entry["calls"] += gen.stats.verification_calls or len(gen.token_ids)
                entry["equal"] &= gen.token_ids == run.greedy
        task_res["timing"] = timing
        results["tasks"][task] = task_res
        print(json.dumps(task_res, indent=1, default=str), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=1, default=str))   # raw figures beside it
    out.write_text(render(results, args))
    print(f"wrote {out}")
    return 0


def render(results, args) -> str:
    lines = [f"## Measured ({args.model}, {args.dtype}, {args.limit} prompts per task, {args.max_new_tokens} new tokens, "
             f"{args.threads} thread(s))", ""]
    names = list(next(iter(results["tasks"].values()))["block_efficiency"])
    lines += ["| strategy | " + " | ".join(results["tasks"]) + " |", "|---|" + "---|" * len(results["tasks"])]
    for name in names:
        row = []
        for task, res in results["tasks"].items():
            be = res["block_efficiency"][name]
            base = res["block_efficiency"]["none (plain BPD, k=1)"]
            row.append(f"{be:.3f} ({100 * (be / base - 1):+.1f}%)")
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    lines += ["", "| task | steps | mean entropy heads 2.. (nats, shortlist) | h_max | %consec vanilla -> rescored | "
              "max run | win / tie / loss (repair% of wins) |", "|---|---|---|---|---|---|---|"]
    for task, res in results["tasks"].items():
        w = res["win_tie_loss"]
        lines.append(f"| {task} | {res['steps']} | {', '.join(f'{e:.2f}' for e in res['mean_entropy'])} | "
                     f"{res['h_max'] + 1} | {res['consec_vanilla'][0]:.1f} -> {res['consec_rescored'][0]:.1f} | "
                     f"{res['consec_vanilla'][1]:.2f} -> {res['consec_rescored'][1]:.2f} | {w['wins']} / {w['ties']} / "
                     f"{w['losses']} ({100 * w['win_repair'] / max(w['wins'], 1):.0f}%) |")
    lines += ["", "| task | mode | tokens | calls | B | tok/s | speedup vs greedy | == greedy |", "|---|---|---|---|---|---|---|---|"]
    for task, res in results["tasks"].items():
        greedy = res["timing"]["greedy"]
        g_rate = greedy["tokens"] / greedy["seconds"]
        for mode, t in res["timing"].items():
            rate = t["tokens"] / t["seconds"]
            lines.append(f"| {task} | {mode} | {t['tokens']} | {t['calls']} | {t['tokens'] / t['calls']:.2f} | "
                         f"{rate:.2f} | {rate / g_rate:.2f}x | {t['equal']} |")
    return "\n".join(lines) + "\n"

