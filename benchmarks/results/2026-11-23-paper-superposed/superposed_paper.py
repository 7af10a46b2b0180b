"""Superposed Decoding paper experiments (arXiv 2405.18400) at the scale this machine allows (issue #21).

    S=benchmarks/results/2026-11-23-paper-superposed/superposed_paper.py
    python $S tune      --ngram-file OOD.ngram --ngram-name ood --validation 16        # alpha x tau grid, then lambda
    python $S quality   --ngram-file IN.ngram --ood-ngram-file OOD.ngram --test 30      # Tables 1-3 analogue
    python $S ablate    --ngram-file IN.ngram --test 12                                 # Figs. 10-11 (prefix length, G)
    python $S long      --ngram-file IN.ngram --test 6 --new-tokens 200                 # Fig. 8 + App. I (resets)
    python $S linearity --test 10 --steps 20                                             # Eq. 8, Figs. 3 and 15
    python $S figures                                                                    # PNGs from the JSON files

Model: smollm2-135m (fp32, one torch thread). Scorer: the same model (see superposed.md for why). Prefixes:
15 tokens of held-out ShareGPT answers and Linux-doc paragraphs (documents no n-gram file counted), one list
drawn once and split into a validation part (tuning only) and a disjoint test part (everything else).
Results go to benchmarks/papers/results/superposed_*.json (atomic writes), figures next to superposed.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

import multidraft
from multidraft.eval.metrics import mean, self_bleu
from multidraft.fsutil import atomic_path
from multidraft.ngram import NGramModel
from multidraft.superposed.decoder import SuperposedConfig, superposed_decode
from multidraft.superposed.ngram_mixture import PAPER_WEIGHTS
from multidraft.eval.metrics import token_log_probs
from multidraft.superposed.paper_eval import (linearity_probe, ngram_greedy, repetition_curve, split_prefixes,
                                              truncate_to_common_length)

HERE = Path(__file__).resolve().parent
RESULTS = HERE                  # the raw results sit beside this script and its README
NUCLEUS = {"temperature": 0.6, "top_p": 0.9}  # the paper's Llama-2 defaults
PAPER = {
    "alpha": 0.54, "tau": 0.06, "lambda": list(PAPER_WEIGHTS),
    "ngram4": {"alpha": 0.55, "tau": 0.10, "lambda": [0.01, 0.04, 0.15]},
    # Table 1 (Llama-2-7B, OWT, scored by Llama-2-70B): nucleus, beam/greedy, n-gram, SPD #1/#2/#3, best
    # (numbers copied from /work/shared/specs/spd.md §5.4)
    "table1": {"nucleus": 5.17, "beam_greedy": 3.77, "ngram": 152.75, "spd_1": 5.03, "spd_2": 7.97, "spd_3": 10.05,
               "spd_best": 4.63},
    # Table 3 (n <= 4 n-grams, alpha .55, tau .10): SPD #1/#2/#3, best
    "table3": {"spd_1": 5.83, "spd_2": 8.38, "spd_3": 9.97, "spd_best": 5.18},
}
POOL_LENGTH = 40       # prefixes are drawn at 40 tokens (the longest ablation) and cut to the length used
PREFIX_TOKENS = 15
NEW_TOKENS = 10
K = 3


# ------------------------------------------------------------------ setup

def setup(args):
    args.load_start = os.getloadavg()  # the header is written at the end: take the start now
    torch.set_num_threads(1)
    lm = multidraft.load_model(args.model, dtype="float32")
    pool = prefix_pool(lm, args.validation + args.test)
    validation, test = split_prefixes(pool, args.validation)
    return lm, validation, test[: args.test]


def prefix_pool(lm, count):
    from multidraft.superposed.evaluation import eval_prefixes

    return eval_prefixes(lm.tokenizer, count, POOL_LENGTH)


def load_ngram(path, lm):
    return NGramModel.load(path, tokenizer=lm.tokenizer) if path else None


def eos_of(lm):
    return set(lm.eos_token_ids)


def cut_at_eos(tokens, eos):
    for i, t in enumerate(tokens):
        if t in eos:
            return list(tokens[: i + 1])  # a finished draft keeps its EOS (spd.md §5.2)
    return list(tokens)


def spd(lm, prefix, G, ngram, alpha, tau, weights=PAPER_WEIGHTS, k=K, **extra):
    config = SuperposedConfig(num_drafts=k, alpha=alpha if ngram is not None else 0.0, tau=tau,
                              ngram_weights=tuple(weights), **extra)
    result = superposed_decode(lm, prefix, G, config, ngram if config.alpha > 0 else None, seed=0)
    return [list(d.token_ids) for d in result.drafts]


@torch.inference_mode()
def nucleus(lm, prefix, k, G, seed, force_length=False):
    torch.manual_seed(seed)
    ids = torch.tensor([list(prefix)])
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else next(iter(lm.eos_token_ids), 0)
    extra = {"min_new_tokens": G} if force_length else {}
    out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=G,
                            num_return_sequences=k, pad_token_id=pad, top_k=0, **NUCLEUS, **extra)
    return [cut_at_eos(row[len(prefix):].tolist(), eos_of(lm)) for row in out]


def greedy(lm, prefix, G):
    return cut_at_eos(multidraft.generate(lm, list(prefix), method="greedy", max_new_tokens=G).token_ids, eos_of(lm))


def beam(lm, prefix, G, k=K):
    gen = multidraft.generate(lm, list(prefix), method="beam", max_new_tokens=G, num_beams=k)
    return cut_at_eos(gen.token_ids, eos_of(lm))


def score_rows(scorer, prefix, rows):
    """{tuple(draft): per-token log-probs} for the distinct drafts among `rows` (one batched forward)."""
    distinct = list(dict.fromkeys(tuple(r) for r in rows if len(r) > 0))
    return dict(zip(distinct, token_log_probs(scorer, prefix, distinct)))


def ppl(logprobs, first=None):
    lp = logprobs if first is None else logprobs[:first]
    return math.exp(-float(np.mean(lp))) if len(lp) else float("nan")


def write_json(name, payload):
    path = RESULTS / name
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=1))
    print(f"wrote {path}", flush=True)
    return path


def header(args, lm, **more):
    return {"model": args.model, "scorer": args.model, "dtype": str(lm.dtype), "threads": torch.get_num_threads(),
            "load_average_start": getattr(args, "load_start", None), "prefix_tokens": PREFIX_TOKENS, "new_tokens": NEW_TOKENS,
            "k": K, "command": " ".join(["python", *sys.argv]), **more}


# ------------------------------------------------------------------ tune (validation split)

def cmd_tune(args):
    lm, validation, _ = setup(args)
    ngram = load_ngram(args.ngram_file, lm)
    alphas, taus = args.alphas, args.taus
    grid = [(a, t) for a in alphas for t in taus]
    lambdas = {"paper": list(PAPER_WEIGHTS), "uniform": [0.1] * 5, "low_orders": [0.2, 0.15, 0.1, 0.03, 0.02]}
    t0 = time.time()
    per_config = {f"{a}/{t}": {"mean_ppl": [], "best_ppl": []} for a, t in grid}
    prefixes = [p[:PREFIX_TOKENS] for p in validation]
    all_drafts = []
    for i, prefix in enumerate(prefixes):
        drafts = {f"{a}/{t}": spd(lm, prefix, NEW_TOKENS, ngram, a, t) for a, t in grid}
        all_drafts.append(drafts)
        lp = score_rows(lm, prefix, [d for ds in drafts.values() for d in ds])
        for key, ds in drafts.items():
            values = [ppl(lp[tuple(d)]) for d in ds if d]
            per_config[key]["mean_ppl"].append(mean(values))
            per_config[key]["best_ppl"].append(min(values))
        print(f"  tune grid {i + 1}/{len(prefixes)} ({time.time() - t0:.0f}s)", flush=True)
    table = [{"alpha": a, "tau": t, "mean_ppl": mean(per_config[f"{a}/{t}"]["mean_ppl"]),
              "best_ppl": mean(per_config[f"{a}/{t}"]["best_ppl"])} for a, t in grid]
    # The paper's objective: lowest mean perplexity over the k drafts, averaged over validation prefixes.
    best = min(table, key=lambda r: r["mean_ppl"])
    with_ngram = [r for r in table if r["alpha"] > 0]
    best_ngram = min(with_ngram, key=lambda r: r["mean_ppl"]) if with_ngram else best
    lam_rows = []
    for name, weights in lambdas.items():  # lambda tuned at the best alpha > 0 (with alpha = 0 lambda is unused)
        vals, bests = [], []
        for prefix in prefixes:
            ds = spd(lm, prefix, NEW_TOKENS, ngram, best_ngram["alpha"], best_ngram["tau"], weights)
            lp = score_rows(lm, prefix, ds)
            values = [ppl(lp[tuple(d)]) for d in ds if d]
            vals.append(mean(values))
            bests.append(min(values))
        lam_rows.append({"lambda_name": name, "lambda": weights, "mean_ppl": mean(vals), "best_ppl": mean(bests)})
        print(f"  lambda {name}: mean ppl {mean(vals):.3f}", flush=True)
    best_lambda = min(lam_rows, key=lambda r: r["mean_ppl"])
    payload = header(args, lm, split="validation", prefixes=len(prefixes), ngram=str(args.ngram_file),
                     ngram_name=args.ngram_name, objective="mean scorer perplexity over the 3 drafts",
                     grid=table, chosen={"alpha": best["alpha"], "tau": best["tau"]},
                     chosen_with_ngram={"alpha": best_ngram["alpha"], "tau": best_ngram["tau"],
                                        "lambda_name": best_lambda["lambda_name"], "lambda": best_lambda["lambda"]},
                     lambda_rows=lam_rows, paper={"alpha": PAPER["alpha"], "tau": PAPER["tau"]},
                     validation_prefixes=[lm.decode(p) for p in prefixes], seconds=time.time() - t0,
                     load_average_end=os.getloadavg())
    write_json(f"superposed_tune_{args.ngram_name}.json", payload)
    for r in sorted(table, key=lambda r: r["mean_ppl"])[:5]:
        print(f"alpha {r['alpha']} tau {r['tau']}: mean ppl {r['mean_ppl']:.3f}, best-of-3 {r['best_ppl']:.3f}")


def ablation_config(args):
    """Hyperparameters of the ablations: the paper's main values (default; they start before tuning ends)
    or the tuned ones."""
    if args.hyper == "paper":
        return {"alpha": PAPER["alpha"], "tau": PAPER["tau"], "lambda": PAPER["lambda"], "source": "paper"}
    cfg, _ = tuned(args.tune_name)
    return {**cfg, "source": f"tuned ({args.tune_name})"}


def tuned(name):
    path = RESULTS / f"superposed_tune_{name}.json"
    if not path.exists():
        raise SystemExit(f"{path} missing: run `tune --ngram-name {name}` first")
    data = json.loads(path.read_text())
    return data["chosen_with_ngram"], data["chosen"]


# ------------------------------------------------------------------ quality (test split)

def cmd_quality(args):
    lm, _, test = setup(args)
    ngram_in, ngram_ood = load_ngram(args.ngram_file, lm), load_ngram(args.ood_ngram_file, lm)
    tuned_in, _ = tuned(args.tune_name)
    eos = eos_of(lm)
    per_prefix = []
    t0 = time.time()
    for i, full in enumerate(test):
        prefix = full[:PREFIX_TOKENS]
        d = {
            "nucleus": nucleus(lm, prefix, K, NEW_TOKENS, seed=1000 + i),
            "greedy": [greedy(lm, prefix, NEW_TOKENS)],
            "beam": [beam(lm, prefix, NEW_TOKENS)],
            "ngram_in": [ngram_greedy(ngram_in, prefix, NEW_TOKENS, PAPER_WEIGHTS, eos)],
            "ngram_ood": [ngram_greedy(ngram_ood, prefix, NEW_TOKENS, PAPER_WEIGHTS, eos)],
            "spd_paper_in": spd(lm, prefix, NEW_TOKENS, ngram_in, PAPER["alpha"], PAPER["tau"]),
            "spd_paper_ood": spd(lm, prefix, NEW_TOKENS, ngram_ood, PAPER["alpha"], PAPER["tau"]),
            "spd_tuned_in": spd(lm, prefix, NEW_TOKENS, ngram_in, tuned_in["alpha"], tuned_in["tau"], tuned_in["lambda"]),
            "spd_tuned_ood": spd(lm, prefix, NEW_TOKENS, ngram_ood, tuned_in["alpha"], tuned_in["tau"],
                                 tuned_in["lambda"]),
            "spd_ngram4_in": spd(lm, prefix, NEW_TOKENS, ngram_in, PAPER["ngram4"]["alpha"], PAPER["ngram4"]["tau"],
                                 PAPER["ngram4"]["lambda"]),
            "spd_lm_only": spd(lm, prefix, NEW_TOKENS, None, 0.0, PAPER["tau"]),
        }
        lp = score_rows(lm, prefix, [x for ds in d.values() for x in ds])
        m, _ = truncate_to_common_length([x for ds in d.values() for x in ds])
        row = {"prefix": lm.decode(prefix), "common_length": m, "methods": {}}
        for name, ds in d.items():
            row["methods"][name] = {"drafts": [lm.decode(x) for x in ds], "lengths": [len(x) for x in ds],
                                    "ppl": [ppl(lp[tuple(x)]) if x else float("nan") for x in ds],
                                    "ppl_common": [ppl(lp[tuple(x)], m) if x else float("nan") for x in ds],
                                    "self_bleu": self_bleu(ds) if len(ds) >= 2 and min(map(len, ds)) > 0 else None}
        per_prefix.append(row)
        print(f"  quality {i + 1}/{len(test)} ({time.time() - t0:.0f}s)", flush=True)
    summary = {}
    for name in per_prefix[0]["methods"]:
        rows = [r["methods"][name] for r in per_prefix]
        k = max(len(r["ppl"]) for r in rows)
        s = {"drafts": k}
        for key in ("ppl", "ppl_common"):
            s[f"{key}_by_rank"] = [mean([r[key][j] for r in rows if len(r[key]) > j]) for j in range(k)]
            s[f"{key}_best"] = mean([min(v for v in r[key] if v == v) for r in rows])
            s[f"{key}_mean_draft"] = mean([mean(r[key]) for r in rows])
        s["mean_length"] = mean([mean(r["lengths"]) for r in rows])
        s["drafts_shorter_than_G"] = sum(length < NEW_TOKENS for r in rows for length in r["lengths"])
        s["self_bleu"] = mean([r["self_bleu"] for r in rows if r["self_bleu"] is not None]) if k > 1 else None
        summary[name] = s
    for name in summary:  # paired: how often this method's first draft beats nucleus' first sample (common length)
        summary[name]["beats_nucleus_first_common"] = mean(
            [float(r["methods"][name]["ppl_common"][0] < r["methods"]["nucleus"]["ppl_common"][0]) for r in per_prefix])
    payload = header(args, lm, split="test", prefixes=len(test), ngram_in=str(args.ngram_file),
                     ngram_ood=str(args.ood_ngram_file), tuned=tuned_in, paper=PAPER, summary=summary,
                     common_length_histogram=np.bincount([r["common_length"] for r in per_prefix]).tolist(),
                     per_prefix=per_prefix, seconds=time.time() - t0, load_average_end=os.getloadavg())
    write_json("superposed_quality.json", payload)
    for name, s in summary.items():
        print(f"{name:15s} #1 {s['ppl_by_rank'][0]:7.2f} best {s['ppl_best']:7.2f} | common-length #1 "
              f"{s['ppl_common_by_rank'][0]:7.2f} best {s['ppl_common_best']:7.2f} | len {s['mean_length']:.1f}")


# ------------------------------------------------------------------ ablations: prefix length, G (Figs. 10-11)

def cmd_ablate(args):
    lm, _, test = setup(args)
    ngram = load_ngram(args.ngram_file, lm)
    cfg = ablation_config(args)
    t0 = time.time()
    rows = []
    settings = [("prefix", p, NEW_TOKENS) for p in (5, 15, 25, 40)] + [("G", PREFIX_TOKENS, g) for g in (5, 15, 20)]
    for axis, plen, G in settings:
        spd_first, spd_best, spd_mean, nuc_first = [], [], [], []
        for i, full in enumerate(test):
            prefix = full[:plen]
            s = spd(lm, prefix, G, ngram, cfg["alpha"], cfg["tau"], cfg["lambda"])
            n = nucleus(lm, prefix, 1, G, seed=2000 + i)
            m, _ = truncate_to_common_length(s + n)
            lp = score_rows(lm, prefix, s + n)
            sp = [ppl(lp[tuple(x)], m) for x in s if x]
            spd_first.append(sp[0])
            spd_best.append(min(sp))
            spd_mean.append(mean(sp))
            nuc_first.append(ppl(lp[tuple(n[0])], m))
        rows.append({"axis": axis, "prefix_tokens": plen, "new_tokens": G, "spd_1": mean(spd_first),
                     "spd_best": mean(spd_best), "spd_mean_draft": mean(spd_mean), "nucleus": mean(nuc_first),
                     "spd_best_beats_nucleus": mean([float(b < n) for b, n in zip(spd_best, nuc_first)])})
        r = rows[-1]
        print(f"  {axis} prefix={plen} G={G}: SPD #1 {r['spd_1']:.2f} best {r['spd_best']:.2f} nucleus "
              f"{r['nucleus']:.2f} ({time.time() - t0:.0f}s)", flush=True)
    write_json("superposed_ablate.json", header(args, lm, split="test", prefixes=len(test), tuned=cfg,
                                                ngram=str(args.ngram_file), rows=rows, seconds=time.time() - t0,
                                                load_average_end=os.getloadavg()))


# ------------------------------------------------------------------ long generations: Fig. 8 + resets (App. I)

def cmd_long(args):
    lm, _, test = setup(args)
    ngram = load_ngram(args.ngram_file, lm)
    cfg = ablation_config(args)
    G = args.new_tokens
    lengths = [L for L in (5, 10, 20, 50, 100, 200, 400) if L <= G]
    t0 = time.time()
    curves = {name: [] for name in ("nucleus", "spd", "spd_reset10_sample", "spd_reset10_argmax")}
    ppls = {name: [] for name in curves}
    for i, full in enumerate(test):
        prefix = full[:PREFIX_TOKENS]
        d = {"nucleus": nucleus(lm, prefix, K, G, seed=3000 + i, force_length=True),
             "spd": spd(lm, prefix, G, ngram, cfg["alpha"], cfg["tau"], cfg["lambda"]),
             "spd_reset10_sample": spd(lm, prefix, G, ngram, cfg["alpha"], cfg["tau"], cfg["lambda"], reset_every=10,
                                       reset_choice="sample"),
             "spd_reset10_argmax": spd(lm, prefix, G, ngram, cfg["alpha"], cfg["tau"], cfg["lambda"], reset_every=10,
                                       reset_choice="argmax")}
        for name, ds in d.items():
            curves[name].append(repetition_curve(ds, lengths))
            lp = score_rows(lm, prefix, ds[:1])
            ppls[name].append(ppl(lp[tuple(ds[0])]))
        print(f"  long {i + 1}/{len(test)} ({time.time() - t0:.0f}s)", flush=True)
        # written after every prefix, so a run cut short still leaves the prefixes it finished
        summary = {}
        for name, per in curves.items():
            summary[name] = {"first_draft_ppl": mean(ppls[name]), "curve": [
                {"length": L,
                 "unique_ngram_ratio": [mean([p[j]["unique_ngram_ratio"][n] for p in per]) for n in range(3)],
                 "self_bleu": mean([p[j]["self_bleu"] for p in per])} for j, L in enumerate(lengths)]}
        write_json("superposed_long.json", header(args, lm, split="test", prefixes_done=i + 1,
                                                  prefixes_planned=len(test), new_tokens_long=G, tuned=cfg,
                                                  ngram=str(args.ngram_file), summary=summary,
                                                  seconds=time.time() - t0, load_average_end=os.getloadavg()))
    for name, s in summary.items():
        last = s["curve"][-1]
        print(f"{name:20s} ppl#1 {s['first_draft_ppl']:.2f}  L={last['length']}: unique 1/2/3 "
              f"{'/'.join(f'{x:.2f}' for x in last['unique_ngram_ratio'])} self-BLEU {last['self_bleu']:.3f}")


# ------------------------------------------------------------------ linearity (Eq. 8)

def cmd_linearity(args):
    lm, _, test = setup(args)
    t0 = time.time()
    per_prefix, gamma_max = [], []
    for i, full in enumerate(test):
        prefix = full[:PREFIX_TOKENS]
        # The trajectory: SPD without n-grams (alpha = 0: a beam-like search under the LM), its per-step newest
        # tokens and weights gamma, exactly what SPD superposes (the paper used 3-beam search's; spd.md §5.6).
        config = SuperposedConfig(num_drafts=K, alpha=0.0, tau=args.tau)
        result = superposed_decode(lm, prefix, args.steps + 1, config, None, trace=True)
        steps = [t for t in result.trace if t["gamma"] is not None][: args.steps]
        tokens = [t["tokens"].tolist() for t in steps]
        weights = [t["gamma"][: len(t["tokens"])].tolist() for t in steps]
        gamma_max.append([max(w) for w in weights])
        per_prefix.append(linearity_probe(lm, prefix, tokens, weights).tolist())
        print(f"  linearity {i + 1}/{len(test)} ({time.time() - t0:.0f}s)", flush=True)
    cos = np.asarray(per_prefix)  # [prefixes, steps, layers]
    write_json(f"superposed_linearity_tau{args.tau}.json", header(
        args, lm, split="test", prefixes=len(test), steps=args.steps, tau=args.tau,
        layers="0 = embedding mix, 1..L = blocks (L after the final norm), L+1 = logits",
        final_output_mean=cos[:, :, -1].mean(0).tolist(), final_output_std=cos[:, :, -1].std(0).tolist(),
        per_layer_first5_mean=cos[:, :5, :].mean((0, 1)).tolist(), per_layer_first5_std=cos[:, :5, :].mean(1).std(0).tolist(),
        gamma_max_mean=np.asarray(gamma_max).mean(0).tolist(), cosines=per_prefix, seconds=time.time() - t0, load_average_end=os.getloadavg()))
    print("final-output cosine by step:", " ".join(f"{x:.2f}" for x in cos[:, :, -1].mean(0)))


# ------------------------------------------------------------------ figures

def cmd_figures(args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def save(fig, name):
        path = HERE / name
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
        plt.close(fig)
        print(f"wrote {path}")

    for tune_file in sorted(RESULTS.glob("superposed_tune_*.json")):
        data = json.loads(tune_file.read_text())
        alphas = sorted({r["alpha"] for r in data["grid"]})
        taus = sorted({r["tau"] for r in data["grid"]})
        grid = np.array([[next(r["mean_ppl"] for r in data["grid"] if r["alpha"] == a and r["tau"] == t)
                          for t in taus] for a in alphas])
        fig, ax = plt.subplots(figsize=(5, 4))
        im = ax.imshow(grid, cmap="viridis_r", aspect="auto")
        ax.set_xticks(range(len(taus)), [str(t) for t in taus])
        ax.set_yticks(range(len(alphas)), [str(a) for a in alphas])
        for (y, x), v in np.ndenumerate(grid):
            ax.text(x, y, f"{v:.1f}", ha="center", va="center", color="w", fontsize=8)
        ax.set_xlabel("tau")
        ax.set_ylabel("alpha")
        ax.set_title(f"validation: mean ppl of 3 SPD drafts ({data['ngram_name']} n-grams)")
        fig.colorbar(im)
        save(fig, f"superposed_tune_{data['ngram_name']}.png")
    path = RESULTS / "superposed_ablate.json"
    if path.exists():
        rows = json.loads(path.read_text())["rows"]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        for ax, axis, key, label in ((axes[0], "prefix", "prefix_tokens", "prefix length (tokens)"),
                                     (axes[1], "G", "new_tokens", "generation length G")):
            sel = sorted([r for r in rows if r["axis"] == axis or (r["prefix_tokens"] == PREFIX_TOKENS
                                                                    and r["new_tokens"] == NEW_TOKENS)],
                         key=lambda r: r[key])
            xs = [r[key] for r in sel]
            for name, style in (("nucleus", "k-o"), ("spd_1", "b-s"), ("spd_best", "g-^")):
                ax.plot(xs, [r[name] for r in sel], style, label=name)
            ax.set_xlabel(label)
            ax.set_ylabel("perplexity (common length)")
            ax.legend()
        save(fig, "superposed_ablate.png")
    path = RESULTS / "superposed_long.json"
    if path.exists():
        summary = json.loads(path.read_text())["summary"]
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        for name, s in summary.items():
            xs = [c["length"] for c in s["curve"]]
            axes[0].plot(xs, [c["unique_ngram_ratio"][1] for c in s["curve"]], "-o", label=name)
            axes[1].plot(xs, [c["self_bleu"] for c in s["curve"]], "-o", label=name)
        for ax, label in ((axes[0], "unique 2-gram ratio (higher = less repetition)"),
                          (axes[1], "Self-BLEU of the 3 drafts (lower = more diverse)")):
            ax.set_xscale("log")
            ax.set_xlabel("first L generated tokens")
            ax.set_ylabel(label, fontsize=8)
        axes[1].legend(fontsize=7)
        save(fig, "superposed_long.png")
    for lin in sorted(RESULTS.glob("superposed_linearity_tau*.json")):
        data = json.loads(lin.read_text())
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
        mu, sd = np.array(data["final_output_mean"]), np.array(data["final_output_std"])
        xs = np.arange(1, len(mu) + 1)
        axes[0].errorbar(xs, mu, yerr=sd, fmt="-o")
        axes[0].axhline(0.6, color="grey", ls="--", lw=1)
        axes[0].set_xlabel("timestep")
        axes[0].set_ylabel("cosine, logits (Eq. 8)")
        lm_, ls_ = np.array(data["per_layer_first5_mean"]), np.array(data["per_layer_first5_std"])
        axes[1].errorbar(np.arange(len(lm_)), lm_, yerr=ls_, fmt="-o")
        axes[1].set_xlabel("layer (0 = embedding mix, last = logits)")
        axes[1].set_ylabel("cosine, first 5 timesteps")
        fig.suptitle(f"linearity probe, smollm2-135m, tau={data['tau']}")
        save(fig, f"superposed_linearity_tau{data['tau']}.png")


# ------------------------------------------------------------------ entry point

def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=["tune", "quality", "ablate", "long", "linearity", "figures"])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--ngram-file", help="n-gram file for SPD (tune: the one tuned with)")
    parser.add_argument("--ngram-name", default="in", help="tune: label of --ngram-file in the output name")
    parser.add_argument("--ood-ngram-file", help="quality: out-of-domain n-gram file")
    parser.add_argument("--tune-name", default="in", help="which tuning result the other experiments use")
    parser.add_argument("--hyper", choices=["paper", "tuned"], default="paper",
                        help="ablate/long: the paper's alpha/tau/lambda or the tuned ones")
    parser.add_argument("--validation", type=int, default=16, help="validation prefixes (tuning only)")
    parser.add_argument("--test", type=int, default=30, help="test prefixes")
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.0, 0.3, 0.54, 0.8])
    parser.add_argument("--taus", type=float, nargs="+", default=[0.03, 0.06, 0.15])
    parser.add_argument("--new-tokens", type=int, default=200, help="long: tokens per generation")
    parser.add_argument("--steps", type=int, default=20, help="linearity: timesteps")
    parser.add_argument("--tau", type=float, default=0.06, help="linearity: SPD temperature (sets gamma)")
    args = parser.parse_args(argv)
    {"tune": cmd_tune, "quality": cmd_quality, "ablate": cmd_ablate, "long": cmd_long, "linearity": cmd_linearity,
     "figures": cmd_figures}[args.experiment](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
