"""PLD+ paper experiments (arXiv 2412.01447) at the scale this machine allows: small model, few prompts.

    python benchmarks/results/2026-11-23-paper-pldplus/pldplus_paper.py ablate --model smollm2-135m --prompts 6 --max-new-tokens 128
    python benchmarks/results/2026-11-23-paper-pldplus/pldplus_paper.py speed --model smollm2-135m --prompts 3 --max-new-tokens 96

`ablate` (Tables 6-8, Figs. 3-4): greedy outputs of test-split prompts are fixed (a lossless drafter cannot change
them), so every drafter setting is replayed exactly on them from the artifacts of one full forward: PLD+(a) with the
top-k calibrated heads (Table 6) and other head sets (Fig. 3), PLD+(h) with a cosine threshold (Table 7) and an
averaging window (Table 8), and every drafter against K (Fig. 4). Metric: mean acceptance length (AAL) at K = 10,
the paper's ablation setting; also drafted tokens per step (what a rejected draft costs to verify).

`speed` (Tables 1 and 2): real decoding, round-robin per prompt, greedy (T = 0) and sampling (T = 1). Speedup is
Spec-Bench's: mean per-prompt throughput of the method / that of plain decoding, with throughput = new tokens /
process CPU seconds (one torch thread, so CPU time is compute time; wall time on this shared 2-core machine drifts
with other jobs' load). Wall-time speedups are printed beside it.

Baselines, named: `pld[reference]` is the paper's PLD (Saxena / Spec-Bench: n <= 3, K = 10 whole tokens after the
earliest match, no overlap with the trailing n-gram); `pld[hf]` is the library's default matching rule (HF's: the
continuation may be truncated by the end of the context); `hf_prompt_lookup` is transformers' own generate().
PLD+ rows use the paper's K = 70 (the library default is 16/4, tuned for CPU verification costs; see
benchmarks/results/2026-11-22-pld-plus/README.md).
The calibration (layer, heads) is the one shipped for the model (validation split, see pldplus/calibrations/*.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

import multidraft
from multidraft.drafters.prompt_lookup import lookup
from multidraft.eval.tasks import load_task
from multidraft.pldplus import calibration
from multidraft.pldplus.ranking import candidates, rank_attention, rank_hidden
from multidraft.pldplus.sweep import all_hidden_states

from multidraft.eval.hf_peers import hf_prompt_lookup

PAPER = {
    "table6": {10: 3.17, 20: 3.18, 30: 3.2, 40: 3.21, 50: 3.21, 100: 2.93, 200: 2.9, 300: 2.9, "all": 2.9},
    "table7_tok_s": {"none": 92.26, -0.75: 94.44, -0.5: 93.79, 0.0: 95.05, 0.5: 76.86, 0.75: 57.73},
    "table8": {1: 3.14, 2: 3.05, 3: 3.04, 4: 3.03, 5: 3.01, 6: 3.00},
}


# ----- replay -----
def replay(seq, prompt_length, propose, num_draft_tokens):
    """(tokens, steps, drafted) a drafter takes on the fixed output seq[prompt_length:], counted as the loop does."""
    n, steps, drafted = prompt_length, 0, 0
    while n < len(seq):
        budget = min(num_draft_tokens, len(seq) - n - 1)
        draft = propose(seq[:n], budget) if budget > 0 and n >= 2 else []
        accepted = 0
        while accepted < len(draft) and draft[accepted] == seq[n + accepted]:
            accepted += 1
        n += accepted + 1
        steps += 1
        drafted += len(draft)
    return len(seq) - prompt_length, steps, drafted


def copy_after(seq, source, budget, eos):
    if source is None:
        return []
    draft = seq[source + 1: source + 1 + budget]
    for i, token in enumerate(draft):
        if token in eos:
            return draft[:i]
    return draft


@torch.inference_mode()
def attention_rows(lm, seq, first_query):
    """(L, G, Q, T) eager attention of every head, query rows first_query.. only."""
    kept = {}

    def make_hook(index):
        def hook(_module, _inputs, output):
            kept[index] = output[1][0, :, first_query:, :].float().cpu()
        return hook
    handles = [layer.self_attn.register_forward_hook(make_hook(i)) for i, layer in enumerate(lm._decoder_layers)]
    try:
        lm.forward(lm.new_cache(), list(seq), logits_rows=slice(-1, None))
    finally:
        for h in handles:
            h.remove()
    return torch.stack([kept[i] for i in range(len(lm._decoder_layers))])


def greedy_outputs(lm, args):
    """[(task, id, token ids, prompt length)] of the test-split prompts; cached in --outputs (generation is the slow part)."""
    if args.outputs and Path(args.outputs).exists():
        return [tuple(x) for x in json.loads(Path(args.outputs).read_text())]
    outputs = []
    for task in args.tasks.split(","):
        for item in load_task(task, limit=args.prompts):
            ids = lm.encode(item.input)
            out = multidraft.generate(lm, ids, method="greedy", max_new_tokens=args.max_new_tokens)
            outputs.append((task, item.id, ids + out.token_ids, len(ids)))
            print(f"{item.id}: {len(ids)} + {len(out.token_ids)} tokens", file=sys.stderr, flush=True)
    write(args.outputs, outputs)
    return outputs


def ablate(args):
    lm = multidraft.load_model(args.model, dtype=torch.float32, attn_implementation="eager")
    outputs = greedy_outputs(lm, args)
    if args.collect_only:
        return
    record = read_calibration(lm, args.calibration)
    layer = args.layer or record["layer"]
    ranked = [tuple(h) for h in record["induction_heads"]]
    all_heads = [(l, g) for l in range(lm.num_layers) for g in range(lm.num_heads)]
    eos = set(lm.eos_token_ids)
    K = args.k
    hidden_settings = {f"theta={t}": dict(theta=t) for t in (None, -0.75, -0.5, 0.0, 0.5, 0.75)}
    hidden_settings.update({f"m={m}": dict(window=m) for m in range(2, 7)})
    head_settings = {f"top{k}": (ranked[:k], "max") for k in (10, 20, 30, 40, 50, 100, 200) if k <= len(ranked)}
    head_settings["all heads, max"] = (all_heads, "max")
    head_settings["all heads, sum"] = (all_heads, "sum")
    head_settings["top50, sum"] = (ranked[:50], "sum")
    best_head_layer = max(range(lm.num_layers), key=lambda l: sum(1 for h in ranked[:50] if h[0] == l))
    layer_heads = [(best_head_layer, g) for g in range(lm.num_heads)]
    head_settings[f"layer {best_head_layer} (most top-50 heads), max"] = (layer_heads, "max")
    head_settings[f"layer {best_head_layer}, sum"] = (layer_heads, "sum")
    k_values = (10, 20, 40, 70, 100)
    totals: dict = {}

    def add(name, task, result):
        totals.setdefault(name, {}).setdefault(task, np.zeros(3, dtype=np.int64))
        totals[name][task] += result

    done = []
    wanted = args.tasks.split(",")
    outputs = sorted((o for o in outputs if o[0] in wanted), key=lambda o: wanted.index(o[0]))
    for task, prompt_id, seq, n0 in outputs:
        hidden = all_hidden_states(lm, seq[:-1])[layer]
        first_query = max(0, n0 - 2)
        rows = attention_rows(lm, seq[:-1], first_query)       # (L, G, Q, T)

        def hidden_proposer(theta=None, window=1):
            def propose(prefix, budget):
                return copy_after(prefix, rank_hidden(hidden[: len(prefix) - 1], candidates(prefix), theta,
                                                      window), budget, eos)
            return propose

        def attention_proposer(heads, agg):
            index = torch.tensor(heads)

            def propose(prefix, budget):
                q = len(prefix) - 2
                row = rows[index[:, 0], index[:, 1], q - first_query, : q + 1]
                return copy_after(prefix, rank_attention(row, candidates(prefix), agg), budget, eos)
            return propose

        for name, options in hidden_settings.items():
            add(f"hidden {name}", task, replay(seq, n0, hidden_proposer(**options), K))
        for name, (heads, agg) in head_settings.items():
            add(f"attention {name}", task, replay(seq, n0, attention_proposer(heads, agg), K))
        for k in k_values:
            add(f"K={k} pld[reference]", task, replay(
                seq, n0, lambda p, b, k=k: lookup(p, 3, k, b, "reference"), k))
            add(f"K={k} pld[hf]", task, replay(seq, n0, lambda p, b, k=k: lookup(p, 3, k, b, "hf", eos), k))
            add(f"K={k} pld+ hidden", task, replay(seq, n0, hidden_proposer(), k))
            add(f"K={k} pld+ attention top50", task, replay(seq, n0, attention_proposer(ranked[:50], "max"), k))
        done.append(prompt_id)
        # Written after every prompt, so a run cut short by the machine's budget still leaves its results.
        result = {"model": lm.name, "layer": layer, "calibration": record["source"], "prompts": done, "k": K,
                  "max_new_tokens": args.max_new_tokens, "heads_ranked": len(ranked), "paper": PAPER,
                  "totals": {name: {task: v.tolist() for task, v in by_task.items()} for name, by_task in totals.items()}}
        write(args.out, result)
        print(f"{prompt_id}: replayed", file=sys.stderr, flush=True)
    print_ablation(result)


def print_ablation(result):
    tasks = list(next(iter(result["totals"].values())))
    print(f"model {result['model']}, layer {result['layer']}, K = {result['k']} (Fig. 4 rows: their K); "
          f"AAL (drafted tokens per step)")
    print("| setting | " + " | ".join(tasks) + " | all |")
    print("|---" * (len(tasks) + 2) + "|")
    for name, by_task in result["totals"].items():
        cells = []
        for counts in list(by_task.values()) + [np.sum(list(by_task.values()), axis=0)]:
            tokens, steps, drafted = counts
            cells.append(f"{tokens / steps:.3f} ({drafted / steps:.1f})")
        print(f"| {name} | " + " | ".join(cells) + " |")


# ----- the layer curve (Fig. 5) from a calibration record -----
def curve(args):
    record = json.loads(Path(args.calibration).read_text())
    points = record["layer_curve"]
    rule = record["layer_rule"]
    print(f"{record['model']}: {record['num_prompts']} prompts ({record.get('split', '?')} split), "
          f"{record['events']} copy events {record.get('events_by_task')}; pooled AAL at K = 10 per layer, "
          f"{int(rule['confidence'] * 100)}% bootstrap interval over prompts ({rule['resamples']} resamples); "
          f"band {rule['band']}; best {rule['best']}; chosen {record['layer']} ({rule['rule']})")
    print("| layer | AAL | 95% CI | within noise of the best |")
    print("|---|---|---|---|")
    for layer, p in points.items():
        mark = " **chosen**" if int(layer) == record["layer"] else ""
        print(f"| {layer}{mark} | {p['aal']:.3f} | {p['low']:.3f}-{p['high']:.3f} | {'yes' if p['tied_with_best'] else 'no'} |")
    if args.png:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        layers = [int(l) for l in points]
        aal = np.array([points[str(l)]["aal"] for l in layers])
        low = np.array([points[str(l)]["low"] for l in layers])
        high = np.array([points[str(l)]["high"] for l in layers])
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.axvspan(min(rule["band"]) - 0.5, max(rule["band"]) + 0.5, color="0.9", label="paper's band (9-13 of 32)")
        ax.errorbar(layers, aal, yerr=[aal - low, high - aal], fmt="o-", ms=3, capsize=2, label="PLD+(h), K = 10")
        ax.axvline(record["layer"], color="C3", ls="--", label=f"chosen layer {record['layer']}")
        ax.set_xlabel("layer l (hidden_states[l], 0 = embeddings)")
        ax.set_ylabel("mean acceptance length")
        ax.set_title(f"{record['model']}: {record['num_prompts']} validation prompts, {record['events']} copy events")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(args.png, dpi=120)
        print(f"wrote {args.png}")


# ----- speed -----
PAPER_K = dict(num_draft_tokens=70, short_draft_tokens=None)
GREEDY_METHODS = {
    "AR (greedy)": ("greedy", {}),
    "pld[reference]": ("pld", dict(variant="reference")),
    "pld[hf]": ("pld", dict(variant="hf")),
    "hf_prompt_lookup": ("hf", {}),
    "PLD+ (a), K=70": ("pld_plus", dict(rank_by="attention", **PAPER_K)),
    "PLD+ (h), K=70": ("pld_plus", dict(rank_by="hidden", **PAPER_K)),
}
SAMPLED_METHODS = {
    "AR (sample)": ("sample", {}),
    "pld[reference]": ("pld", dict(variant="reference")),
    "PLD+ (a), K=70": ("pld_plus", dict(rank_by="attention", **PAPER_K)),
    "PLD+ (h), K=70": ("pld_plus", dict(rank_by="hidden", **PAPER_K)),
}


def run_one(lm, item, method, options, temperature, max_new_tokens, seed):
    """(tokens per turn, cpu seconds, wall seconds, verification calls) over all turns of a task prompt."""
    answers, token_lists, cpu, wall, calls = [], [], 0.0, 0.0, 0
    for turn in range(item.num_turns):
        prompt = item.turn_messages(turn, answers) if item.turns else item.input
        ids = lm.encode(prompt)
        c0, w0 = time.process_time(), time.perf_counter()
        if method == "hf":
            tokens, _ = hf_prompt_lookup(lm, ids, max_new_tokens)
        else:
            out = multidraft.generate(lm, ids, method=method, max_new_tokens=max_new_tokens,
                                      temperature=temperature or None, seed=seed + turn, **options)
            tokens = out.token_ids
            calls += out.stats.verification_calls
        cpu += time.process_time() - c0
        wall += time.perf_counter() - w0
        token_lists.append(tokens)
        answers.append(lm.decode(tokens))
    return token_lists, cpu, wall, calls


def read_calibration(lm, path):
    """The calibration record to use: a JSON file written by `multidraft pld-plus calibrate|merge`, else the shipped one."""
    if not path:
        return calibration.load_record(lm.name)
    record = json.loads(Path(path).read_text())
    record["induction_heads"] = [tuple(h[:2]) for h in record.get("induction_heads", record.get("heads", []))]
    record["source"] = str(path)
    return record


def speed(args):
    torch.set_num_threads(1)
    lm = multidraft.load_model(args.model, dtype=torch.float32, attn_implementation="eager")
    record = read_calibration(lm, args.calibration)
    chosen = dict(layer=record["layer"], heads=[list(h) for h in record["induction_heads"][:50]])
    for methods in (GREEDY_METHODS, SAMPLED_METHODS):       # explicit layer / heads: the run names its calibration
        for name, (method, options) in methods.items():
            if method == "pld_plus":
                options.update({"layer": chosen["layer"]} if options["rank_by"] == "hidden" else
                               {"induction_heads": chosen["heads"]})
    rows = []
    for temperature, methods in ((0.0, GREEDY_METHODS), (1.0, SAMPLED_METHODS)):
        if temperature not in args.temperatures:
            continue
        # Prompt 1 of every task, then prompt 2 of every task, ...: a run cut short still covers every task.
        items = [(index, task, item) for task in args.tasks.split(",")
                 for index, item in enumerate(load_task(task, limit=args.prompts))]
        for index, task, item in sorted(items, key=lambda x: x[0]):
            results = {}
            for name, (method, options) in methods.items():
                tokens, cpu, wall, calls = run_one(lm, item, method, options, temperature, args.max_new_tokens,
                                                   seed=1000 * index)
                results[name] = tokens
                rows.append(dict(temperature=temperature, task=task, prompt=item.id, method=name,
                                 tokens=sum(map(len, tokens)), cpu=cpu, wall=wall, calls=calls,
                                 same_as_ar=tokens == results[next(iter(methods))]))
            # Written after every prompt, so a run cut short by the machine's budget still leaves its rows.
            result = {"model": lm.name, "prompts_per_task": args.prompts, "max_new_tokens": args.max_new_tokens,
                      "threads": 1, "calibration": record["source"], "layer": chosen["layer"], "rows": rows}
            write(args.out, result)
            print(f"T={temperature} {item.id} done", file=sys.stderr, flush=True)
    print_speed(result)


def print_speed(result):
    rows = result["rows"]
    for temperature in sorted({r["temperature"] for r in rows}):
        sub = [r for r in rows if r["temperature"] == temperature]
        tasks = list(dict.fromkeys(r["task"] for r in sub))
        methods = list(dict.fromkeys(r["method"] for r in sub))
        base = methods[0]
        print(f"\nT = {temperature:g}: speedup by CPU time (wall) [AAL]; Spec-Bench definition")
        print("| method | " + " | ".join(tasks) + " | all |")
        print("|---" * (len(tasks) + 2) + "|")
        for method in methods:
            cells = []
            for chosen in [[t] for t in tasks] + [tasks]:
                def mean_rate(m, clock):
                    return statistics.mean(r["tokens"] / r[clock] for r in sub if r["method"] == m and r["task"] in chosen)
                mine = [r for r in sub if r["method"] == method and r["task"] in chosen]
                calls = sum(r["calls"] for r in mine)
                aal = f" [{sum(r['tokens'] for r in mine) / calls:.2f}]" if calls else ""
                cells.append(f"{mean_rate(method, 'cpu') / mean_rate(base, 'cpu'):.2f}x "
                             f"({mean_rate(method, 'wall') / mean_rate(base, 'wall'):.2f}x){aal}")
            print(f"| {method} | " + " | ".join(cells) + " |")
        if temperature == 0:
            differ = [f"{r['method']}:{r['prompt']}" for r in sub if not r["same_as_ar"]]
            print(f"outputs that differ from greedy: {differ or 'none'}")


def write(path, result):
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(str(path) + ".tmp")
        tmp.write_text(json.dumps(result, indent=1))
        tmp.replace(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func in (("ablate", ablate), ("speed", speed)):
        p = sub.add_parser(name)
        p.add_argument("--model", default="smollm2-135m")
        p.add_argument("--tasks", default="summarize,code_edit,text_edit")
        p.add_argument("--prompts", type=int, default=3, help="test-split prompts per task")
        p.add_argument("--max-new-tokens", type=int, default=96)
        p.add_argument("--out", default=None, help="JSON results file")
        p.add_argument("--calibration", default=None, help="calibration JSON (default: the one shipped for the model)")
        p.set_defaults(func=func)
        if name == "ablate":
            p.add_argument("--k", type=int, default=10)
            p.add_argument("--outputs", default=None, help="greedy outputs cache (JSON): read if present, else written")
            p.add_argument("--collect-only", action="store_true", help="only generate the greedy outputs")
            p.add_argument("--layer", type=int, default=None, help="PLD+(h) layer (default: the calibrated one)")
        else:
            p.add_argument("--temperatures", type=lambda s: [float(x) for x in s.split(",")], default=[0.0, 1.0])
    p = sub.add_parser("curve", help="the layer curve of a calibration record (markdown table, optional PNG)")
    p.add_argument("calibration")
    p.add_argument("--png", default=None)
    p.set_defaults(func=curve)
    p = sub.add_parser("show")
    p.add_argument("json")
    p.set_defaults(func=lambda a: (print_ablation if "totals" in (r := json.loads(Path(a.json).read_text()))
                                   else print_speed)(r))
    args = parser.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
