"""BPD paper experiments ("Exploring and Improving Drafts in Blockwise Parallel Decoding", specs/bpd.md) at the
scale this machine allows: smollm2-135m with 8 trained heads (h = 9), a few prompts per task.

    python benchmarks/results/2026-11-23-paper-bpd/bpd_paper.py ngrams                      # the three n-gram rescorers (Table 7)
    python benchmarks/results/2026-11-23-paper-bpd/bpd_paper.py offline --prompts 6 --max-new-tokens 48
    python benchmarks/results/2026-11-23-paper-bpd/bpd_paper.py latency
    python benchmarks/results/2026-11-23-paper-bpd/bpd_paper.py figures

`offline`: block efficiency B (generated tokens / verification calls, pooled over a task's prompts) of every
strategy from one greedy run plus one teacher-forced forward per prompt (bpd.md §3.7; a unit test ties it to the
online loop). Covers Table 10 (h = 3/6/9: the first h-1 heads of one h = 9 set, see OfflineRun.with_heads),
Fig. 6 (oracle vs lattice width k), Fig. 7 (p-best with and without an n-gram), Table 3 (% consecutive repeats,
2-gram as in the paper and 3-gram as in our other reports), Table 7 (in-domain vs out-of-domain vs mixed
n-grams) and the n-gram search time on the real lattices.
`tune-alpha`: the rescoring weight alpha chosen per task on held-out prompts (Appendix E), then B on the test
prompts with the tuned alpha beside alpha = 1.
`latency`: Tables 12-13 (search time vs N and lattice size) and the cost model of Table 11 with our measured
forward, heads and search times (one torch thread; costs measured interleaved so load hits all alike).
Rescoring weight alpha = 1 in `offline`; `tune-alpha` gives the tuned values (see the report).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import multidraft
from multidraft.blockwise import load_heads
from multidraft.blockwise.cost import MeasuredCosts, kv_bytes_per_position, kv_io, parameter_io
from multidraft.blockwise.drafter import BlockwiseStrategy, ngram_logprob_fn
from multidraft.blockwise.evaluation import OfflineRun, consecutive_stats
from multidraft.blockwise.lattice import Lattice, build_lattice, paths_to_tree, pbest_paths
from multidraft.eval.tasks import load_task
from multidraft.fsutil import atomic_path

HERE = Path(__file__).resolve().parent
RESULTS = HERE                  # the raw results sit beside this script and its README

# N-gram rescorers (Table 7). "code" is in-domain for HumanEval, "chat" for MT-Bench; "mix" is the general one
# (the paper's C4): equal parts of the three corpora. Documents are taken with a stride, up to a token budget.
NGRAM_SETS = {"code": ("cpython-stdlib",), "chat": ("sharegpt",), "mix": ("sharegpt", "linux-doc", "cpython-stdlib")}
IN_DOMAIN = {"humaneval": "code", "chat": "chat"}

PAPER = {
    "table10": {"LAMBADA": (1.79, 2.84, 3.12), "SQuAD V1": (1.53, 2.03, 2.08), "CNN/Daily": (1.60, 1.71, 1.74),
                "SAMSum": (1.18, 1.25, 1.27), "MultiNews": (1.08, 1.08, 1.10), "XSUM": (1.11, 1.12, 1.13),
                "NewsRoom": (1.07, 1.08, 1.08)},
    "table3": {"LAMBADA": (20.0, 10.7, 2.2, 1.8), "SQuAD V1": (75.5, 67.6, 6.6, 6.1), "CNN/Daily": (46.4, 21.9, 3.8, 2.5),
               "SAMSum": (29.9, 20.0, 3.1, 2.5), "MultiNews": (33.6, 14.7, 3.1, 2.1), "XSUM": (24.0, 9.4, 2.6, 1.7),
               "NewsRoom": (47.2, 32.1, 4.1, 3.3)},
    "table12_ms": {1: 1.630, 2: 1.751, 4: 1.878, 8: 1.871, 16: 1.983},
    "table13_ms": {(4, 2): 1.038, (4, 4): 1.050, (4, 8): 1.130, (4, 16): 1.237, (8, 2): 1.061, (8, 4): 1.144,
                   (8, 8): 1.234, (8, 16): 1.630, (16, 2): 1.102, (16, 4): 1.206, (16, 8): 1.558, (16, 16): 2.174},
    # Table 11 block-efficiency row (means over the paper's 7 tasks).
    "table11_b": {"base": 1.646, "4-gram": 1.657, "neural-61M": 1.724, "16-best 0-gram": 1.717, "16-best 4-gram": 1.797},
}


def ngram_path(folder: Path, name: str) -> Path:
    return folder / f"bpdpaper-smollm2-{name}-2-4.ngram"


def write_json(path: Path, payload) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(payload, indent=1, default=str))
    print(f"wrote {path}")


def load(kind: str, lm, folder: Path):
    from multidraft.ngram import NGramModel

    path = ngram_path(folder, kind)
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `python {Path(__file__).name} ngrams` first")
    return NGramModel.load(path, tokenizer=lm.tokenizer)


# ----------------------------------------------------------------------------- ngrams
def cmd_ngrams(args) -> int:
    """Three n-gram files of orders 2-4 over ~args.tokens tokens each (strided documents of the pulled corpora)."""
    from multidraft.data import iter_documents
    from multidraft.ngram.build import build
    from multidraft.ngram.corpus import load_tokenizer, tokenize_documents
    from multidraft.tokenizer_identity import vocab_fingerprint

    tokenizer = load_tokenizer(args.model)
    folder = Path(args.ngram_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for name, corpora in NGRAM_SETS.items():
        budget = args.tokens // len(corpora)

        def docs():
            for corpus in corpora:
                taken = 0
                texts = (t for i, t in enumerate(iter_documents(corpus)) if i % args.stride == 1)
                for ids in tokenize_documents(texts, tokenizer):
                    yield ids
                    taken += len(ids)
                    if taken >= budget:
                        break

        started = time.perf_counter()
        stats = build(docs(), len(tokenizer), ngram_path(folder, name), max_order=4, orders=[2, 3, 4],
                      tokenizer_name=args.model, tokenizer_fingerprint=vocab_fingerprint(tokenizer),
                      corpora=[f"{c} (every {args.stride}th doc from 1)" for c in corpora])
        print(f"{name}: {stats.num_tokens:,} tokens, {stats.num_documents:,} documents, "
              f"{time.perf_counter() - started:.0f}s -> {ngram_path(folder, name)}", flush=True)
    return 0


# ----------------------------------------------------------------------------- offline
class Timed:
    """A strategy whose draft search time (process CPU and wall) is recorded per call."""

    def __init__(self, strategy: BlockwiseStrategy):
        self.strategy, self.lattice_k = strategy, strategy.lattice_k
        self.calls, self.cpu, self.wall = 0, 0.0, 0.0

    def drafts(self, lattice, context):
        c0, w0 = time.process_time(), time.perf_counter()
        out = self.strategy.drafts(lattice, context)
        self.cpu += time.process_time() - c0
        self.wall += time.perf_counter() - w0
        self.calls += 1
        return out


def strategies(ngrams: dict, task: str, k: int, alpha: float, p_grid, k_grid) -> dict:
    """name -> (num_heads, strategy). The general n-gram ("mix") serves every row but the Table 7 ones."""
    mix = ngrams["mix"]
    out = {}
    for h in (3, 6, 9):
        out[f"h={h} vanilla"] = (h, BlockwiseStrategy("none", 1, 1))
    for p in p_grid:                                                   # Fig. 7 (k = 16)
        out[f"p={p} 0-gram"] = (9, BlockwiseStrategy("none", k, p))
        out[f"p={p} 2-gram"] = (9, BlockwiseStrategy("ngram", k, p, alpha, mix, 2))
    # 3-gram p-best: 1-best only (p = 4 and 16 cost 0.6-1.9 s of CPU per step in this pure-Python DP: cut).
    out["p=1 3-gram"] = (9, BlockwiseStrategy("ngram", k, 1, alpha, mix, 3))
    for kk in k_grid:                                                  # k sweep, 1-best 2-gram
        if kk != k:
            out[f"k={kk} 2-gram 1-best"] = (9, BlockwiseStrategy("ngram", kk, 1, alpha, mix, 2))
    for name, model in ngrams.items():                                 # Table 7 (the mix row is "p=1 2-gram")
        if name != "mix":
            tag = "in-domain" if IN_DOMAIN.get(task) == name else "other-domain"
            out[f"T7 2-gram {name} ({tag}) 1-best"] = (9, BlockwiseStrategy("ngram", k, 1, alpha, model, 2))
    return out


def cmd_offline(args) -> int:
    torch.set_num_threads(1)
    lm = multidraft.load_model(args.model, dtype="float32")
    heads = load_heads(lm, args.heads, 9)
    folder = Path(args.ngram_dir)
    ngrams = {name: load(name, lm, folder) for name in NGRAM_SETS}
    p_grid = [int(x) for x in args.p_grid.split(",")]
    k_grid = [int(x) for x in args.k_grid.split(",")]
    meta = {k: v for k, v in heads.meta.items() if k not in ("path",)}
    results = {"config": vars(args), "heads": meta, "ngrams": {n: str(ngram_path(folder, n)) for n in NGRAM_SETS},
               "load_before": os.getloadavg(), "tasks": {}}
    for task in args.tasks.split(","):
        named = strategies(ngrams, task, args.k, args.alpha, p_grid, k_grid)
        timed = {name: (h, Timed(s)) for name, (h, s) in named.items()}
        pooled = {name: [0, 0] for name in list(named) + [f"h={h} oracle k={kk}" for h in (3, 6, 9) for kk in k_grid]}
        consec = {"vanilla": [], "2-gram": [], "3-gram": []}
        per_prompt, started = [], time.perf_counter()
        for item in load_task(task, args.prompts):
            ids = lm.encode(item.input)
            run9 = OfflineRun(lm, heads, ids, args.max_new_tokens, num_heads=9)
            runs = {h: run9.with_heads(h) for h in (3, 6, 9)}
            row = {"id": item.id, "tokens": run9.total}
            for name, (h, strategy) in timed.items():
                r = runs[h].run(strategy)
                pooled[name][0] += r.tokens
                pooled[name][1] += r.calls
                row[name] = r.block_efficiency
            for h in (3, 6, 9):
                for kk in k_grid:
                    r = runs[h].run_oracle(kk)
                    pooled[f"h={h} oracle k={kk}"][0] += r.tokens
                    pooled[f"h={h} oracle k={kk}"][1] += r.calls
            # Table 3: drafts along the vanilla trajectory (A13), full h-token drafts incl. the certain token.
            r2 = BlockwiseStrategy("ngram", args.k, 1, args.alpha, ngrams["mix"], 2)
            r3 = BlockwiseStrategy("ngram", args.k, 1, args.alpha, ngrams["mix"], 3)
            for decided in run9.vanilla_steps():
                lat = run9.lattice(decided, args.k)
                if lat is None:
                    continue
                ctx = run9.context(decided)
                consec["vanilla"].append([lat.first_token] + lat.vanilla())
                consec["2-gram"].append([lat.first_token] + r2.drafts(lat, ctx)[0])
                consec["3-gram"].append([lat.first_token] + r3.drafts(lat, ctx)[0])
            per_prompt.append(row)
            print(f"{task} {item.id}: {run9.total} tokens, h=9 vanilla {row['h=9 vanilla']:.3f}, "
                  f"16-best 2-gram {row.get('p=16 2-gram', float('nan')):.3f} ({time.perf_counter() - started:.0f}s)",
                  flush=True)
        res = {"prompts": len(per_prompt), "offline_seconds": time.perf_counter() - started,
               "block_efficiency": {n: t / c for n, (t, c) in pooled.items() if c},
               "tokens": {n: t for n, (t, c) in pooled.items()}, "calls": {n: c for n, (t, c) in pooled.items()},
               "search_ms_per_step": {n: {"cpu": 1e3 * s.cpu / max(s.calls, 1), "wall": 1e3 * s.wall / max(s.calls, 1),
                                          "steps": s.calls} for n, (h, s) in timed.items()},
               "consec": {n: dict(zip(("pct_consec", "max_run"), consecutive_stats(d)), steps=len(d))
                          for n, d in consec.items()},
               "per_prompt": per_prompt}
        results["tasks"][task] = res
        print(json.dumps({k: v for k, v in res.items() if k != "per_prompt"}, indent=1), flush=True)
    results["load_after"] = os.getloadavg()
    write_json(Path(args.out), results)
    return 0


# ----------------------------------------------------------------------------- latency
def interleaved(fns: dict, repeats: int) -> dict:
    """Median process-CPU and wall seconds of each callable, run round-robin `repeats` times."""
    cpu = {n: [] for n in fns}
    wall = {n: [] for n in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
    return {n: {"cpu": statistics.median(cpu[n]), "wall": statistics.median(wall[n])} for n in fns}


def concat(a: Lattice, b: Lattice) -> Lattice:
    return Lattice(a.first_token, np.concatenate([a.tokens, b.tokens]), np.concatenate([a.scores, b.scores]))


def cmd_latency(args) -> int:
    torch.set_num_threads(1)
    lm = multidraft.load_model(args.model, dtype="float32")
    heads = load_heads(lm, args.heads, 9)
    mix = load("mix", lm, Path(args.ngram_dir))
    item = load_task(args.task, 1)[0]
    ids = lm.encode(item.input)
    run = OfflineRun(lm, heads, ids, args.max_new_tokens, num_heads=9)
    decided_list = run.vanilla_steps()[1:1 + args.lattices]
    lattices = {d: run.lattice(d, 16) for d in decided_list}
    logprob = {n: ngram_logprob_fn(mix, n) for n in (2, 3)}
    out = {"config": vars(args), "load_before": os.getloadavg(), "prompt": item.id, "lattices": len(lattices)}

    def search(order, p, k, length):
        def go():
            for d, lat in lattices.items():
                sub = Lattice(lat.first_token, lat.tokens[:, :k], lat.scores[:, :k])
                if length > sub.length:
                    sub = concat(sub, sub)          # L = 16 from two real 8-column lattices
                sub = Lattice(sub.first_token, sub.tokens[:length], sub.scores[:length])
                if order:
                    pbest_paths(sub, p, 1.0, logprob[order], order, run.context(d))
                else:
                    pbest_paths(sub, p)
        return go

    per = len(lattices)
    # Table 12: N-best of an 8-step, 16-arc lattice; Table 13: 1-best vs lattice size.
    t12 = {}
    for order in (0, 2, 3):
        res = interleaved({p: search(order, p, 16, 8) for p in (1, 2, 4, 8, 16)}, args.repeats)
        t12[order] = {p: {m: 1e3 * v[m] / per for m in v} for p, v in res.items()}
        print("table12", order, t12[order], flush=True)
    t13 = {}
    for order in (2, 3):
        fns = {(length, k): search(order, 1, k, length) for length in (4, 8, 16) for k in (2, 4, 8, 16)}
        res = interleaved(fns, args.repeats)
        t13[order] = {f"{length}x{k}": {m: 1e3 * v[m] / per for m in v} for (length, k), v in res.items()}
        print("table13", order, t13[order], flush=True)
    out["table12_ms_per_lattice"] = t12
    out["table13_ms_per_lattice"] = t13

    # Table 11 / cost model: one forward of 1 token, of the h = 9 block, of the 16-best 2-gram tree; the heads;
    # lattice build; searches. All at the real context (prompt + output so far) of the first measured step.
    decided = decided_list[0]
    context = run.sequence[:len(run.prompt) + decided]
    cache = lm.new_cache()
    lm.forward(cache, context[:-1], logits_rows=slice(-1, None))
    base_len = cache.length
    lat16 = lattices[decided]
    tree16 = paths_to_tree([list(p.tokens) for p in pbest_paths(lat16, 16, 1.0, logprob[2], 2, context)])
    tree16_0 = paths_to_tree([list(p.tokens) for p in pbest_paths(lat16, 16)])
    hidden = torch.randn(lm.hidden_size)

    def fwd(tokens, parents=None):
        def go():
            lm.forward(cache, tokens, parents=parents, hidden_layer=lm.num_layers)
            cache.crop(base_len)
        return go

    def tree_tokens(tree):
        return [context[-1]] + list(tree.token_ids), [-1] + [q + 1 for q in tree.parents]

    t16_tokens, t16_parents = tree_tokens(tree16)
    t0_tokens, t0_parents = tree_tokens(tree16_0)
    block9 = [context[-1]] + lat16.vanilla()
    fns = {"forward 1 token": fwd([context[-1]]),
           "forward h=3 block (3 tokens)": fwd(block9[:3]),
           "forward h=6 block (6 tokens)": fwd(block9[:6]),
           "forward h=9 block (9 tokens)": fwd(block9),
           f"forward 16-best 0-gram tree ({len(t0_tokens)} nodes)": fwd(t0_tokens, t0_parents),
           f"forward 16-best 2-gram tree ({len(t16_tokens)} nodes)": fwd(t16_tokens, t16_parents),
           "heads h=9 (8 heads, 1 position)": lambda: heads.draft_logits(hidden, 9),
           "lattice build k=16": lambda: build_lattice(context[-1], heads.draft_logits(hidden, 9), 16, heads.token_ids),
           "search 2-gram 1-best": lambda: pbest_paths(lat16, 1, 1.0, logprob[2], 2, context),
           "search 2-gram 16-best": lambda: pbest_paths(lat16, 16, 1.0, logprob[2], 2, context),
           "search 0-gram 16-best": lambda: pbest_paths(lat16, 16),
           "search 3-gram 1-best": lambda: pbest_paths(lat16, 1, 1.0, logprob[3], 3, context)}
    costs = interleaved(fns, args.repeats)
    out["step_costs_s"] = costs
    out["context_length"] = base_len
    out["load_after"] = os.getloadavg()
    print(json.dumps(costs, indent=1), flush=True)
    write_json(Path(args.out), out)
    return 0


# ----------------------------------------------------------------------------- report tables and figures
def cost_model(offline: dict, latency: dict, task: str, clock: str = "cpu") -> list[dict]:
    """Predicted time per token and speedup of each setting from measured costs and measured B."""
    c = {k: v[clock] for k, v in latency["step_costs_s"].items()}
    be = offline["tasks"][task]["block_efficiency"]
    tree0 = next(v for k, v in c.items() if k.startswith("forward 16-best 0-gram"))
    tree2 = next(v for k, v in c.items() if k.startswith("forward 16-best 2-gram"))
    rows = []
    for name, b, verify, search in (
            ("base BPD (h=9, k=1)", be["h=9 vanilla"], c["forward h=9 block (9 tokens)"], 0.0),
            ("2-gram 1-best (k=16)", be["p=1 2-gram"], c["forward h=9 block (9 tokens)"],
             c["lattice build k=16"] - c["heads h=9 (8 heads, 1 position)"] + c["search 2-gram 1-best"]),
            ("16-best 0-gram", be["p=16 0-gram"], tree0,
             c["lattice build k=16"] - c["heads h=9 (8 heads, 1 position)"] + c["search 0-gram 16-best"]),
            ("16-best 2-gram", be["p=16 2-gram"], tree2,
             c["lattice build k=16"] - c["heads h=9 (8 heads, 1 position)"] + c["search 2-gram 16-best"])):
        m = MeasuredCosts(c["forward 1 token"], verify, c["heads h=9 (8 heads, 1 position)"], max(search, 0.0))
        rows.append({"setting": name, "B": b, "ms_per_token": 1e3 * m.time_per_token(b),
                     "ar_ms_per_token": 1e3 * m.ar_forward, "speedup": m.speedup(b),
                     "break_even_B": m.break_even_block_efficiency()})
    return rows


def io_model(offline: dict, task: str, lm_config: dict) -> dict:
    """The paper's Table 11 I/O model with SmolLM2-135M's sizes (bf16 weights and KV, as the paper's 2 bytes)."""
    be = offline["tasks"][task]["block_efficiency"]
    model_bytes = lm_config["params"] * 2
    ckv = kv_bytes_per_position(lm_config["layers"], lm_config["kv_heads"], lm_config["head_dim"], 2)
    settings = {"autoregressive": (1.0, 1), "base BPD": (be["h=9 vanilla"], 1), "2-gram BPD": (be["p=1 2-gram"], 1),
                "16-best 0-gram": (be["p=16 0-gram"], 16), "16-best 2-gram": (be["p=16 2-gram"], 16)}
    out = {}
    for name, (b, p) in settings.items():
        ar = name == "autoregressive"
        out[name] = {"B": b, "param_io_MB": parameter_io(model_bytes, b) / 1e6,
                     **{f"kv_io_MB_L{L}": kv_io(ckv, L, b, p, 9, autoregressive=ar) / 1e6 for L in (128, 512, 1024, 2048)}}
    return out


def cmd_figures(args) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    offline = json.loads(Path(args.offline).read_text())
    tasks = list(offline["tasks"])
    p_grid = [int(x) for x in offline["config"]["p_grid"].split(",")]
    k_grid = [int(x) for x in offline["config"]["k_grid"].split(",")]
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        be = offline["tasks"][task]["block_efficiency"]
        ax.plot(p_grid, [be[f"p={p} 0-gram"] for p in p_grid], "o-", label="p-best 0-gram")
        ax.plot(p_grid, [be[f"p={p} 2-gram"] for p in p_grid], "s-", label="p-best 2-gram (mix)")
        three = [p for p in p_grid if f"p={p} 3-gram" in be]
        ax.plot(three, [be[f"p={p} 3-gram"] for p in three], "^-", label="p-best 3-gram (mix)")
        ax.axhline(be["h=9 oracle k=16"], color="k", ls="--", label="oracle k=16")
        ax.axhline(be["h=9 vanilla"], color="grey", ls=":", label="vanilla BPD")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("p (drafts verified per call), k = 16")
        ax.set_ylabel("block efficiency")
        ax.set_title(f"{task}: Fig. 7 p sweep (h = 9)")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "bpd_p_sweep_smollm2.png", dpi=110)
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        be = offline["tasks"][task]["block_efficiency"]
        for h, marker in ((3, "o"), (6, "s"), (9, "^")):
            ax.plot(k_grid, [be[f"h={h} oracle k={k}"] for k in k_grid], marker + "-", label=f"oracle, h = {h}")
        ks = [k for k in k_grid if k > 1]
        ax.plot(ks, [be[f"k={k} 2-gram 1-best"] if k != 16 else be["p=1 2-gram"] for k in ks], "x--",
                label="2-gram 1-best, h = 9")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("lattice width k (top-k per head)")
        ax.set_ylabel("block efficiency")
        ax.set_title(f"{task}: Fig. 6 oracle vs k, Table 10 h")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(HERE / "bpd_k_sweep_smollm2.png", dpi=110)
    print("wrote", HERE / "bpd_p_sweep_smollm2.png", HERE / "bpd_k_sweep_smollm2.png")
    return 0


def cmd_merge(args) -> int:
    """One offline JSON from per-task runs made side by side (same config but the task list)."""
    parts = [json.loads(Path(f).read_text()) for f in args.parts]
    merged = dict(parts[0], tasks={}, parts=[{"config": p["config"], "load_before": p["load_before"],
                                             "load_after": p.get("load_after")} for p in parts])
    for part in parts:
        merged["tasks"].update(part["tasks"])
    merged["config"] = dict(parts[0]["config"], tasks=",".join(merged["tasks"]))
    write_json(Path(args.out), merged)
    return 0


def cmd_show(args) -> int:
    """Print the report's tables from the JSON results."""
    offline = json.loads(Path(args.offline).read_text())
    latency = json.loads(Path(args.latency).read_text()) if args.latency and Path(args.latency).exists() else None
    for task, res in offline["tasks"].items():
        be = res["block_efficiency"]
        print(f"\n## {task} ({res['prompts']} prompts, {sum(r['tokens'] for r in res['per_prompt'])} tokens)")
        for name, value in be.items():
            ms = res["search_ms_per_step"].get(name)
            extra = f"  search {ms['cpu']:.2f} ms/step cpu ({ms['steps']} steps)" if ms else ""
            print(f"{name:45s} {value:.3f} ({100 * (value / be['h=9 vanilla'] - 1):+.1f}%)  "
                  f"[{res['tokens'][name]}/{res['calls'][name]}]{extra}")
        print("consec", res["consec"])
        if latency:
            for row in cost_model(offline, latency, task):
                print("cost", row)
            print("io", json.dumps(io_model(offline, task, SMOLLM2), indent=0))
    return 0


# ----------------------------------------------------------------------------- alpha tuning
def pooled_block_efficiency(runs: list, strategy) -> float:
    tokens = calls = 0
    for run in runs:
        r = run.run(strategy)
        tokens, calls = tokens + r.tokens, calls + r.calls
    return tokens / calls


def cmd_tune_alpha(args) -> int:
    """The paper's Appendix E: alpha chosen per task on held-out prompts, then B on the test prompts.

    Tuning prompts are the task's prompts `--tune-offset` .. `--tune-offset + --tune-prompts - 1`, disjoint from the
    first `--prompts` that `offline` (the report's test set) uses. B at alpha = 1 is recomputed on the test prompts
    in the same run, so the tuned and untuned rows come from the same greedy runs."""
    if args.tune_offset < args.prompts:
        raise SystemExit("--tune-offset must be >= --prompts: tuning and test prompts must not overlap")
    torch.set_num_threads(1)
    lm = multidraft.load_model(args.model, dtype="float32")
    heads = load_heads(lm, args.heads, 9)
    mix = load("mix", lm, Path(args.ngram_dir))
    grid = [float(a) for a in args.alpha_grid.split(",")]
    rows = {"2-gram 1-best": 1, "2-gram 16-best": 16}
    results = {"config": vars(args), "load_before": os.getloadavg(), "tasks": {}}
    started = time.perf_counter()
    for task in args.tasks.split(","):
        items = load_task(task, args.tune_offset + args.tune_prompts)
        def runs_of(chosen):
            return [OfflineRun(lm, heads, lm.encode(item.input), args.max_new_tokens, num_heads=9) for item in chosen]
        tune_runs = runs_of(items[args.tune_offset:])
        test_runs = runs_of(items[:args.prompts])
        out = {"tune_ids": [i.id for i in items[args.tune_offset:]], "test_ids": [i.id for i in items[:args.prompts]],
               "vanilla": {"tune": pooled_block_efficiency(tune_runs, BlockwiseStrategy("none", 1, 1)),
                           "test": pooled_block_efficiency(test_runs, BlockwiseStrategy("none", 1, 1))}}
        for name, p in rows.items():
            tune = {a: pooled_block_efficiency(tune_runs, BlockwiseStrategy("ngram", args.k, p, a, mix, 2)) for a in grid}
            best = max(grid, key=lambda a: (tune[a], -abs(a - 1.0)))        # ties: the value nearest the default 1
            test = {a: pooled_block_efficiency(test_runs, BlockwiseStrategy("ngram", args.k, p, a, mix, 2))
                    for a in sorted({best, 1.0})}
            out[name] = {"tune": tune, "alpha": best, "test": test}
            print(f"{task} {name}: tune {tune} -> alpha {best}; test {test} "
                  f"({time.perf_counter() - started:.0f}s)", flush=True)
        results["tasks"][task] = out
    results["load_after"] = os.getloadavg()
    write_json(Path(args.out), results)
    return 0


SMOLLM2 = {"params": 134_515_008, "layers": 30, "kv_heads": 3, "head_dim": 64}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--heads", help="heads file with >= 9 heads (default: the newest for the model in the cache)")
    ap.add_argument("--ngram-dir", default=str(Path.home() / ".cache" / "multidraft" / "ngram"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("ngrams")
    s.add_argument("--tokens", type=int, default=3_000_000, help="tokens per n-gram file")
    s.add_argument("--stride", type=int, default=3, help="take every stride-th document")
    s.set_defaults(func=cmd_ngrams)
    s = sub.add_parser("offline")
    s.add_argument("--tasks", default="humaneval,chat")
    s.add_argument("--prompts", type=int, default=8)
    s.add_argument("--max-new-tokens", type=int, default=64)
    s.add_argument("--k", type=int, default=16, help="lattice width of the rescoring rows (paper: 16)")
    s.add_argument("--alpha", type=float, default=1.0)
    s.add_argument("--p-grid", default="1,2,4,8,16")
    s.add_argument("--k-grid", default="1,2,4,8,16")
    s.add_argument("--out", default=str(RESULTS / "bpd_offline_smollm2.json"))
    s.set_defaults(func=cmd_offline)
    s = sub.add_parser("latency")
    s.add_argument("--task", default="humaneval")
    s.add_argument("--max-new-tokens", type=int, default=64)
    s.add_argument("--lattices", type=int, default=5, help="real lattices timed per setting")
    s.add_argument("--repeats", type=int, default=3)
    s.add_argument("--out", default=str(RESULTS / "bpd_latency_smollm2.json"))
    s.set_defaults(func=cmd_latency)
    s = sub.add_parser("figures")
    s.add_argument("--offline", default=str(RESULTS / "bpd_offline_smollm2.json"))
    s.set_defaults(func=cmd_figures)
    s = sub.add_parser("merge")
    s.add_argument("parts", nargs="+")
    s.add_argument("--out", default=str(RESULTS / "bpd_offline_smollm2.json"))
    s.set_defaults(func=cmd_merge)
    s = sub.add_parser("tune-alpha")
    s.add_argument("--tasks", default="humaneval,chat")
    s.add_argument("--prompts", type=int, default=6, help="test prompts: the first N, as `offline` ran them")
    s.add_argument("--tune-offset", type=int, default=6, help="first tuning prompt (>= --prompts)")
    s.add_argument("--tune-prompts", type=int, default=6)
    s.add_argument("--max-new-tokens", type=int, default=48)
    s.add_argument("--k", type=int, default=16)
    s.add_argument("--alpha-grid", default="0,0.1,0.25,0.5,1,2")
    s.add_argument("--out", default=str(RESULTS / "bpd_alpha_smollm2.json"))
    s.set_defaults(func=cmd_tune_alpha)
    s = sub.add_parser("show")
    s.add_argument("--offline", default=str(RESULTS / "bpd_offline_smollm2.json"))
    s.add_argument("--latency", default=str(RESULTS / "bpd_latency_smollm2.json"))
    s.set_defaults(func=cmd_show)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
