"""Seed 002's selection experiments under the paper's conditions, with exact per-token acceptance.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/results/2026-11-23-selection/selection_paper.py acceptance --source synthetic \
        --instances 300 --json benchmarks/results/2026-11-23-selection/selection_paper_synthetic.json
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/results/2026-11-23-selection/selection_paper.py acceptance --source real \
        --prompts 4 --tokens 32 --json benchmarks/results/2026-11-23-selection/selection_paper_real.json
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/results/2026-11-23-selection/selection_paper.py block --steps 300 \
        --json benchmarks/results/2026-11-23-selection/selection_paper_block.json

`acceptance`: for every law pair (selection_laws.py) and every experiment of the paper (Table 1: K = 2..6
identical drafts at draft T 1.2; Fig. 3: K = 2, draft T 1.2..2.4; Fig. 4: non-identical drafts, draft 1 at 1.2,
draft 2 at 1.2..2.4; Table 2: M and s sweeps at draft-2 T 1.6 (spec A8); Table 4: top-k 10 / 5 at T 1, K = 2, 3),
the exact accept-branch probability of each scheme (`closed_form_acceptance`, the paper's Table 3 quantity),
averaged over positions, beside the optimum P* where it is computable. Target T = 1 throughout; top-p 0.95 on
both models except in Table 4 (top-k instead).
`block`: block efficiency (tokens per draft call, L = 4) of the draft-and-verify loop simulated on
context-dependent synthetic laws (the same `select` calls the real loop makes, no model forwards), for Table 1
and Fig. 3; its "vs SD" column is the block-efficiency gain over single-draft speculative sampling at the same
draft temperature, an upper bound of the token-rate gain (the extra drafts and the selection rule cost time).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch

from multidraft.fsutil import atomic_path
from multidraft.selection import closed_form_acceptance, optimal_acceptance, select, surviving_drafts
from selection_laws import context_logits, real_logits, real_prompt_texts, synthetic_logits, warp

PAPER_IS = {"s": 5, "alphabet_size": 40}


def scheme_table(identical: bool, support: int) -> list[tuple[str, str, dict]]:
    """(label, scheme, options) compared in each experiment. 'IS' is the paper's scheme (is_lp_truncated)."""
    rows = [("SpecInfer", "specinfer", {})]
    if identical:
        rows.append(("SpecTr", "spectr", {}))
    rows += [
        ("IS (s=5, M=40)", "is_lp_truncated", PAPER_IS),
        ("IS (s=5, M=|supp q|)", "is_lp_truncated", {"s": 5, "alphabet_size": support}),
        ("classical IS (auto)", "is", {}),
    ]
    return rows


def experiments():
    """(table, setting label, K, draft temperatures, warp kwargs)."""
    top_p = {"top_p": 0.95}
    for k in range(2, 7):
        yield "Table 1", f"K={k}", k, [1.2] * k, top_p
    for t in (1.2, 1.4, 1.6, 2.0, 2.4):
        yield "Fig. 3", f"T_draft={t}", 2, [t, t], top_p
    for t in (1.2, 1.6, 2.0, 2.4):
        yield "Fig. 4", f"T_draft2={t}", 2, [1.2, t], top_p
    for top_k in (10, 5):
        for k in (2, 3):
            yield "Table 4", f"top-k {top_k}, K={k}", k, [1.0] * k, {"top_k": top_k}


def sweep_rows():
    """Table 2: non-identical drafts (1.2, 1.6); alphabet M sweep at s = 5 and s sweep at M = 40."""
    for m in (10, 20, 40, 50):
        yield f"M={m}, s=5", {"s": 5, "alphabet_size": m}
    for s in (5, 10, 15):
        yield f"M=40, s={s}", {"s": s, "alphabet_size": 40}


def measure_position(target_logits, draft_logits, results):
    for table, label, k, temps, warp_kwargs in experiments():
        target = warp(target_logits, 1.0, **warp_kwargs)
        rows = {t: warp(draft_logits, t, **warp_kwargs) for t in set(temps)}
        drafts = torch.stack([rows[t] for t in temps])
        identical = len(set(temps)) == 1
        support = int((target > 0).sum())
        cell = results.setdefault(table, {}).setdefault(label, {})
        cell.setdefault("SD (K=1)", []).append(closed_form_acceptance("speculative", drafts[:1], target))
        for name, scheme, options in scheme_table(identical, support):
            if scheme == "is" and not identical and k > 2:
                continue
            cell.setdefault(name, []).append(closed_form_acceptance(scheme, drafts, target, **options))
        if identical:
            cell.setdefault("optimal P*", []).append(optimal_acceptance(drafts, target))
        cell.setdefault("|supp q|", []).append(support)
    target = warp(target_logits, 1.0, top_p=0.95)
    drafts = torch.stack([warp(draft_logits, 1.2, top_p=0.95), warp(draft_logits, 1.6, top_p=0.95)])
    cell = results.setdefault("Table 2", {})
    for label, options in sweep_rows():
        cell.setdefault(label, {}).setdefault("IS", []).append(
            closed_form_acceptance("is_lp_truncated", drafts, target, **options))
    cell.setdefault("SpecInfer (reference)", {}).setdefault("SpecInfer", []).append(
        closed_form_acceptance("specinfer", drafts, target))


def law_pairs(args):
    if args.source == "synthetic":
        rng = np.random.default_rng(args.seed)
        for _ in range(args.instances):
            yield synthetic_logits(rng, args.vocab, args.noise, tuple(args.sharpness))
    else:
        yield from real_logits(real_prompt_texts(args.prompts), args.tokens, args.draft_layers, model=args.model, draft_model=args.draft_model)


def run_acceptance(args):
    results: dict = {}
    start = time.perf_counter()
    count = 0
    for target_logits, draft_logits in law_pairs(args):
        measure_position(target_logits, draft_logits, results)
        count += 1
        if count % 50 == 0:
            print(f"{count} positions, {time.perf_counter() - start:.0f} s", flush=True)
    summary = {table: {label: {name: statistics.fmean(v) for name, v in cell.items()}
                       for label, cell in rows.items()} for table, rows in results.items()}
    print(f"\n{count} positions ({args.source}); mean exact accept-branch probability per position")
    for table, rows in summary.items():
        print(f"\n{table}")
        for label, cell in rows.items():
            print(f"  {label:>18}: " + "  ".join(f"{name} {value:.4f}" for name, value in cell.items()))
    return {"positions": count, "mean": summary}


def simulate(scheme, options, temps, steps, length, seed, vocab, noise, top_p=0.95):
    """(mean, standard error) of tokens per draft-and-verify step on context-dependent synthetic laws."""
    generator = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    context: tuple = (0,)
    per_step = []
    for step in range(steps):
        cache: dict = {}

        def target_of(ctx):
            if ctx not in cache:
                target_logits, draft_logits = context_logits(ctx, seed, vocab, noise)
                cache[ctx] = (draft_logits, warp(target_logits, 1.0, top_p), {})
            return cache[ctx][1]

        def law_of(ctx, temperature):
            target_of(ctx)
            draft_logits, _, drafts = cache[ctx]
            if temperature not in drafts:
                drafts[temperature] = warp(draft_logits, temperature, top_p)
            return drafts[temperature]

        chains = []
        for t in temps:                                   # K draft chains of `length` tokens
            ctx, chain = context, []
            for _ in range(length):
                token = int(rng.choice(vocab, p=law_of(ctx, t).numpy()))
                chain.append(token)
                ctx = ctx + (token,)
            chains.append(chain)
        alive = list(range(len(temps)))
        ctx, emitted = context, 0
        for depth in range(length):
            candidates = [chains[k][depth] for k in alive]
            draft_rows = torch.stack([law_of(ctx, temps[k]) for k in alive])
            target = target_of(ctx)
            run_scheme = "speculative" if len(alive) == 1 else scheme
            run_options = {} if len(alive) == 1 else options
            if run_scheme == "spectr" and len({temps[k] for k in alive}) > 1:
                run_scheme = "specinfer"
            token, _ = select(run_scheme, candidates, draft_rows, target, generator, **run_options)
            emitted += 1
            ctx = ctx + (token,)
            keep = surviving_drafts(candidates, token)
            alive = [k for k, kept in zip(alive, keep.tolist()) if kept]
            if not alive:
                break
        else:
            emitted += 1                                   # every draft token accepted: one bonus target token
            ctx = ctx + (int(torch.multinomial(target_of(ctx).float(), 1, generator=generator)),)
        per_step.append(emitted)
        context = ctx[-8:]
    return statistics.fmean(per_step), statistics.stdev(per_step) / len(per_step) ** 0.5


def run_block(args):
    table: dict = {}
    settings = [("Table 1", f"K={k}", [1.2] * k) for k in range(2, 7)]
    settings += [("Fig. 3", f"T_draft={t}", [t, t]) for t in (1.2, 1.6, 2.0, 2.4)]
    start = time.perf_counter()
    for name, label, temps in settings:
        cell = table.setdefault(name, {}).setdefault(label, {})
        cell["SD (K=1)"] = simulate("speculative", {}, temps[:1], args.steps, args.length, args.seed, args.vocab,
                                    args.noise)
        for scheme_label, scheme, options in [("SpecInfer", "specinfer", {}), ("SpecTr", "spectr", {}),
                                              ("IS (s=5, M=40)", "is_lp_truncated", PAPER_IS)]:
            cell[scheme_label] = simulate(scheme, options, temps, args.steps, args.length, args.seed, args.vocab,
                                          args.noise)
        print(f"{name} {label}: " + "  ".join(f"{k} {v[0]:.3f}±{v[1]:.3f}" for k, v in cell.items())
              + f"  ({time.perf_counter() - start:.0f} s)", flush=True)
    return {"block_efficiency": table}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["acceptance", "block"])
    parser.add_argument("--source", choices=["synthetic", "real"], default="synthetic")
    parser.add_argument("--instances", type=int, default=300, help="synthetic positions")
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--noise", type=float, default=1.0, help="synthetic draft logit noise (std)")
    parser.add_argument("--sharpness", type=float, nargs=2, default=[0.8, 2.5],
                        help="synthetic: range of the per-position logit scale (higher = more peaked laws)")
    parser.add_argument("--prompts", type=int, default=4, help="real: prompts per task (HumanEval, chat)")
    parser.add_argument("--tokens", type=int, default=32, help="real: positions per prompt")
    parser.add_argument("--draft-layers", type=int, default=28, help="real: layers of SmolLM2-135M in the draft")
    parser.add_argument("--model", default="smollm2-135m", help="real: the target model")
    parser.add_argument("--draft-model", default=None,
                        help="real: a separate draft model (e.g. qwen2.5-coder-0.5b) instead of --draft-layers")
    parser.add_argument("--steps", type=int, default=300, help="block: loop steps per setting")
    parser.add_argument("--length", type=int, default=4, help="block: draft length L")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = run_acceptance(args) if args.mode == "acceptance" else run_block(args)
    result["args"] = vars(args)
    if args.json:
        with atomic_path(args.json) as path:      # no half-written file on a crash
            path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
