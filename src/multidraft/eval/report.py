"""The bench report: report.md and PNG plots, rebuilt from results.jsonl alone (`multidraft bench report DIR`).

Everything here is a pure function of the results file, so regenerating gives byte-identical files.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path
from typing import Any, Optional

from multidraft.eval.results import BASELINE_NAMES, RESULTS_NAME, baseline_of, read_results

REPORT_NAME = "report.md"
SPEEDUP_PNG, HISTOGRAM_PNG, SPD_PNG = "speedup.png", "acceptance_histogram.png", "spd_latency.png"
MAX_POSITIONS = 5        # per-position acceptance shown for the first few draft positions


def _f(value: Optional[float], digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _self_bleu(drafts: list[dict]) -> Optional[float]:
    """Self-BLEU (over token ids) of one generation's drafts; None with fewer than two non-empty drafts."""
    from multidraft.eval.metrics import self_bleu
    sequences = [d["token_ids"] for d in drafts if d.get("token_ids")]
    return self_bleu(sequences) if len(sequences) > 1 else None


def _finite_mean(values) -> Optional[float]:
    values = [v for v in values if v is not None and v == v]
    return statistics.mean(values) if values else None


def summarize(rows: list[dict], method: dict, baseline: dict[str, dict],
              matched: Optional[set] = None) -> dict[str, Any]:
    """Numbers of one method on one task. `baseline` maps prompt_id -> baseline row; `matched` holds the prompts
    on which every greedy lossless row equals the baseline's text (all methods then did the same work)."""
    ok = [r for r in rows if r.get("error") is None]
    out: dict[str, Any] = {"prompts": len(rows), "failed": len(rows) - len(ok)}
    # Every prompt failed (a peer that crashed, hung or is not installed): its cells say why instead of a number.
    out["failed_reason"] = None if ok else next((r["error"] for r in rows if r.get("error")), None)
    seconds = sum(r["seconds"] for r in ok)
    out["tok_s"] = sum(r["tokens"] for r in ok) / seconds if seconds else None
    ratios = [(r["prompt_id"], r["tokens_per_second"] / baseline[r["prompt_id"]]["tokens_per_second"]) for r in ok
              if r["prompt_id"] in baseline and baseline[r["prompt_id"]]["tokens_per_second"]]
    speedups = [ratio for _, ratio in ratios]
    out["speedups"] = speedups
    out["speedup"] = (min(speedups), statistics.median(speedups), max(speedups)) if speedups else None
    same_work = [ratio for prompt, ratio in ratios if prompt in (matched or ())]
    out["matched_speedup"] = (statistics.median(same_work), len(same_work)) if same_work else None
    stats = [r["stats"] for r in ok if r.get("stats")]
    calls = sum(s["verification_calls"] for s in stats)
    out["mal"] = sum(s["generated_tokens"] for s in stats) / calls if calls else None
    width = max((len(s["proposed_per_position"]) for s in stats), default=0)
    proposed = [sum(s["proposed_per_position"][i] for s in stats if i < len(s["proposed_per_position"])) for i in range(width)]
    accepted = [sum(s["accepted_per_position"][i] for s in stats if i < len(s["accepted_per_position"])) for i in range(width)]
    out["per_position"] = [a / p for a, p in zip(accepted, proposed) if p]
    histogram: dict[int, int] = {}
    for s in stats:
        for k, v in s.get("acceptance_histogram", {}).items():
            histogram[int(k)] = histogram.get(int(k), 0) + v
    out["histogram"] = dict(sorted(histogram.items()))
    flags = [r["equal_greedy"] for r in ok if r.get("equal_greedy") is not None]
    out["equal"] = (sum(flags), len(flags)) if flags else None
    out["another_model"] = any(r.get("another_model") for r in ok)
    out["perplexity"] = _finite_mean(r.get("perplexity") for r in ok)
    out["best_of_k"] = _finite_mean(t.get("best_of_k_perplexity") for r in ok for t in r["turns"])
    out["self_bleu"] = _finite_mean(_self_bleu(t.get("drafts") or []) for r in ok for t in r["turns"])
    out["latency"] = statistics.median([r["seconds"] for r in ok]) if ok else None
    # The prompt's forward apart (rows that time it: ours, llama.cpp's): a long prompt's prefill can hide the decode
    split = [r for r in ok if r.get("prompt_seconds") is not None]
    out["prompt_s"] = statistics.median([r["prompt_seconds"] for r in split]) if split else None
    decode_seconds = sum(r["seconds"] - r["prompt_seconds"] for r in split)
    out["decode_tok_s"] = sum(r["decode_tokens"] for r in split) / decode_seconds if decode_seconds > 0 else None
    out["lossless"] = method["lossless"]
    out["sampled"] = bool(method.get("temperature"))
    return out


def _method_cell(method: dict) -> str:
    name = f"`{method['label']}`"
    if method["peer"]:
        return name + (" (llama.cpp)" if str(method.get("name", "")).startswith("llama_cpp") else " (HF)")
    if not method["lossless"]:
        return name + " ⚠ lossy"
    return name + (" (sampled)" if method.get("temperature") else "")


def failed_cell(reason: str) -> str:
    """A table cell for a method whose every run failed: 'failed: <reason>', on one line."""
    return "failed: " + " ".join(str(reason).split()).replace("|", "/")


def peer_configs(rows: list[dict]) -> list[str]:
    """The llama.cpp builds the rows ran, described ('llama-cpp-python 0.3.36, CPU: SSE3 AVX AVX2 ...')."""
    from multidraft.eval.llama_cpp_peer import describe
    return list(dict.fromkeys(describe(r["peer_config"]) for r in rows if r.get("peer_config")))


def _equal_cell(s: dict) -> str:
    if s["sampled"]:
        return "n/a (sampled)"
    if s["equal"] is None:
        return "—"
    text = f"{s['equal'][0]}/{s['equal'][1]}"
    if s.get("another_model"):             # against a reference that computes another model: not a loss check
        return f"{text} (another model)"
    return f"**{text} ✗**" if s["lossless"] and s["equal"][0] != s["equal"][1] else text


def _lossless_at_greedy(row: dict) -> bool:
    return bool(row.get("lossless")) and not row.get("temperature")


def differs_from_greedy(row: dict) -> bool:
    """A greedy-time row of a lossless method whose output is not its reference's (our greedy where it ran, else
    the baseline's): a loss, unless the reference computes another model (`another_model`)."""
    return _lossless_at_greedy(row) and row.get("equal_greedy") is False and not row.get("another_model")


def _did_other_work(row: dict) -> bool:
    """A greedy-time row of a lossless method whose output is not the baseline's (rows written before
    equal_baseline existed: their equal_greedy was against the baseline)."""
    return _lossless_at_greedy(row) and row.get("equal_baseline", row.get("equal_greedy")) is False


def analyse(header: dict, rows: list[dict]) -> dict[str, Any]:
    """{task: {label: summary}}, in the header's task and method order, plus mismatches and errors."""
    methods = {m["label"]: m for m in header["methods"]}
    tasks = [t for t in header["tasks"] if any(r["task"] == t for r in rows)]
    reference = baseline_of(header)
    result: dict[str, dict[str, dict]] = {}
    for task in tasks:
        task_rows = [r for r in rows if r["task"] == task]
        baseline = {r["prompt_id"]: r for r in task_rows if r["method"] == reference and r.get("error") is None}
        # In bf16 a near-tied token can flip and send one method down a different text; on the prompts where no
        # greedy lossless row diverged, every method did exactly the same work.
        matched = set(baseline) - {r["prompt_id"] for r in task_rows if _did_other_work(r)}
        result[task] = {}
        for label, method in methods.items():
            mine = [r for r in task_rows if r["method"] == label]
            if mine:
                result[task][label] = summarize(mine, method, baseline, matched)
    mismatches = [r for r in rows if differs_from_greedy(r)]
    errors = [r for r in rows if r.get("error")]
    return {"tasks": result, "methods": methods, "mismatches": mismatches, "errors": errors, "baseline": reference}


def render_tables(header: dict, rows: list[dict], analysis: Optional[dict] = None) -> str:
    """The summary matrix and one table per task (what the CLI prints)."""
    analysis = analysis or analyse(header, rows)
    tasks, methods = analysis["tasks"], analysis["methods"]
    lines = [f"## Summary: median speedup over {BASELINE_NAMES[analysis['baseline']]} (mean acceptance length)", "",
             "| method | " + " | ".join(tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
    for label, method in methods.items():
        cells = []
        for task in tasks:
            s = tasks[task].get(label)
            if s is not None and s["failed_reason"]:
                cells.append(failed_cell(s["failed_reason"]))
            elif s is None or s["speedup"] is None:
                cells.append("—")
            else:
                cells.append(f"{s['speedup'][1]:.2f}x" + (f" ({s['mal']:.2f})" if s["mal"] is not None else ""))
        if any(c != "—" for c in cells):
            lines.append(f"| {_method_cell(method)} | " + " | ".join(cells) + " |")
    for task, summaries in tasks.items():
        count = max(s["prompts"] for s in summaries.values())
        lines += ["", f"## {task} ({count} prompts)", "",
                  "| method | tok/s | prompt s (median) | decode tok/s | speedup min / median / max "
                  "| median on matched prompts (n) | mean acceptance length | per-position acceptance "
                  "| equal to greedy | perplexity | self-BLEU | failed |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for label, s in summaries.items():
            if s["failed_reason"]:
                lines.append(f"| {_method_cell(methods[label])} | {failed_cell(s['failed_reason'])} |"
                             + " |" * 9 + f" {s['failed']} |")
                continue
            speed = " / ".join(f"{x:.2f}" for x in s["speedup"]) if s["speedup"] else "—"
            positions = " ".join(f"{p:.2f}" for p in s["per_position"][:MAX_POSITIONS]) or "—"
            ppl = _f(s["perplexity"]) + (f" (best of k {s['best_of_k']:.2f})" if s["best_of_k"] is not None else "")
            matched = f"{s['matched_speedup'][0]:.2f} ({s['matched_speedup'][1]})" if s["matched_speedup"] else "—"
            lines.append(f"| {_method_cell(methods[label])} | {_f(s['tok_s'])} | {_f(s['prompt_s'])} "
                         f"| {_f(s['decode_tok_s'])} | {speed} | {matched} | {_f(s['mal'])} "
                         f"| {positions} | {_equal_cell(s)} | {ppl} | {_f(s['self_bleu'], 3)} | {s['failed'] or ''} |")
    return "\n".join(lines) + "\n"


def render_report(header: dict, rows: list[dict], plots: list[str]) -> str:
    analysis = analyse(header, rows)
    config, identity = header["config"], header["identity"]
    loads = [r["load_average"] for r in rows if r.get("load_average") is not None]
    runs = header.get("runs", [])
    loaded = sorted({f"{r['dtype']} on {r['device']}" for r in rows if r.get("dtype")})
    runners = sorted({r["runner"] for r in rows if r.get("runner") and not r.get("peer")})
    lines = ["# multidraft bench", "",
             f"- model `{config['model']}`" + (f", draft `{config['draft']}`" if config.get("draft") else "")
             + f", dtype {identity['dtype']}" + (f" ({', '.join(loaded)})" if loaded else "")
             + (f", our rows on runner {' / '.join(runners)}" if runners else "")
             + f", max_new_tokens {identity['max_new_tokens']}, seed {identity['seed']}",
             f"- tasks: {', '.join(header['tasks'])}; started {header.get('created', '?')}; "
             f"{len(runs)} run(s): {', '.join(r['mode'] for r in runs)}",
             f"- load average (1 min) over rows: {min(loads):.1f} to {max(loads):.1f}" if loads else "- load average: —",
             f"- baseline `{analysis['baseline']}` = {BASELINE_NAMES[analysis['baseline']]}. Speedup = tok/s of a method / tok/s of the baseline "
             f"on the same prompt; min / median / max over prompts. Mean acceptance length = generated tokens / target "
             f"verification calls (pooled over prompts); peers (HF, llama.cpp) do not report it. "
             f"Prompt s: the forward over the prompt (ours: the prefill; llama.cpp: up to its first token); decode "
             f"tok/s: the tokens the later forwards made over their time (pooled; HF's generate() does not split "
             f"its time).",
             "- matched prompts: those on which every greedy lossless row equals the baseline's output, so every method "
             "did the same work (in bf16 a near-tied token can flip and change the text, hence the work).",
             "- equal to greedy: token-identical (every turn) to our greedy on the same runner where it ran on the "
             "prompt, else to the baseline's output. Lossless methods must be; ⚠ lossy methods are new decoders and "
             "need not be, nor need llama.cpp peers (8-bit activations on the GGUF). \"another model\": the row and "
             "its reference compute different models (HF's stock weights; the GGUF's blocks with 8-bit activations, "
             "our default CPU runner; llama.cpp), so a difference is the models', not a loss (our lossless methods "
             "are checked against our `greedy` where it runs). Perplexity: of the output given the prompt, under "
             "the target model (lossy, sampled and baseline rows)."]
    for build in peer_configs(rows):
        lines.append(f"- llama.cpp peers ran {build}")
    if identity.get("options"):
        lines.append(f"- method options: `{identity['options']}`")
    if header.get("skipped"):
        lines.append("- not run: " + ", ".join(f"`{k}` ({v})" for k, v in header["skipped"].items()))
    lines += ["", render_tables(header, rows, analysis)]
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    if analysis["mismatches"]:
        lines += ["## Lossless outputs that differ from greedy", ""]
        lines += [f"- {r['task']} `{r['prompt_id']}` `{r['method']}`" for r in analysis["mismatches"]] + [""]
    if analysis["errors"]:
        lines += ["## Failed runs", ""]
        grouped: dict[tuple[str, str], list[dict]] = {}
        for r in analysis["errors"]:          # one line per method and message, not per prompt
            grouped.setdefault((r["method"], r["error"]), []).append(r)
        for (method, error), failed in grouped.items():
            where = ", ".join(f"{r['task']} `{r['prompt_id']}`" for r in failed)
            lines.append(f"- `{method}` on {len(failed)} prompt(s) ({where}): {error}")
        lines.append("")
    env = header.get("env") or (runs[-1].get("env") if runs else None)
    if env:
        lines += ["## Environment", "", "- " + ", ".join(f"{k}: {v}" for k, v in env.items()), ""]
    return "\n".join(lines)


# ---------------------------------------------------------------- plots


def _save(fig, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.png")
    fig.savefig(tmp, dpi=100, metadata={"Software": None})
    os.replace(tmp, path)


def plot_speedup(analysis: dict, path: Path) -> bool:
    import matplotlib.pyplot as plt
    import numpy as np
    tasks = list(analysis["tasks"])
    labels = [m for m in analysis["methods"] if m != analysis["baseline"]
              and any(analysis["tasks"][t].get(m, {}).get("speedup") for t in tasks)]
    if not labels:
        return False
    fig, ax = plt.subplots(figsize=(max(6, 0.9 * len(labels) * max(1, len(tasks)) ** 0.5 + 2), 4.5))
    width = 0.8 / len(tasks)
    x = np.arange(len(labels))
    for i, task in enumerate(tasks):
        mids, lows, highs = [], [], []
        for label in labels:
            s = analysis["tasks"][task].get(label)
            low, mid, high = s["speedup"] if s and s["speedup"] else (np.nan,) * 3
            mids.append(mid), lows.append(mid - low), highs.append(high - mid)
        ax.bar(x + (i - (len(tasks) - 1) / 2) * width, mids, width, yerr=[lows, highs], capsize=3, label=task)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_ylabel(f"speedup over {analysis['baseline']} (median, min-max)")
    ax.set_title("Speedup per method and task")
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


def plot_histograms(analysis: dict, path: Path) -> bool:
    import matplotlib.pyplot as plt
    pooled: dict[str, dict[int, int]] = {}
    for summaries in analysis["tasks"].values():
        for label, s in summaries.items():
            for k, v in s["histogram"].items():
                pooled.setdefault(label, {})[k] = pooled.setdefault(label, {}).get(k, 0) + v
    pooled = {label: h for label, h in pooled.items() if max(h, default=1) > 1}   # methods that accept drafts
    if not pooled:
        return False
    cols = min(3, len(pooled))
    rows = (len(pooled) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3 * rows), squeeze=False)
    for ax, (label, hist) in zip(axes.flat, pooled.items()):
        total = sum(hist.values())
        ax.bar(list(hist), [v / total for v in hist.values()])
        mean = sum(k * v for k, v in hist.items()) / total
        ax.set_title(f"{label} (mean {mean:.2f})", fontsize=9)
        ax.set_xlabel("tokens per target call")
        ax.set_ylabel("fraction of calls")
    for ax in list(axes.flat)[len(pooled):]:
        ax.axis("off")
    fig.suptitle("Acceptance length histograms (all tasks)")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


def plot_spd_latency(header: dict, rows: list[dict], path: Path) -> bool:
    """Superposed latency against k, beside k sequential sampling runs and one greedy run."""
    import matplotlib.pyplot as plt
    ok = [r for r in rows if r.get("error") is None]
    from multidraft.methods import get_method
    key = get_method("superposed").outputs_option          # k: the row's option that sets the number of outputs
    by_k: dict[int, list[float]] = {}
    for r in ok:
        if r["name"] == "superposed":
            k = r["options"].get(key)
            if k is not None:
                by_k.setdefault(int(k), []).append(r["seconds"])
    if not by_k:
        return False
    tasks = {r["task"] for r in ok if r["name"] == "superposed"}
    ks = sorted(by_k)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ks, [statistics.median(by_k[k]) for k in ks], marker="o", label="superposed (one pass)")
    sample = [r["seconds"] for r in ok if r["name"] == "sample" and r["task"] in tasks]
    if sample:
        ax.plot(ks, [k * statistics.median(sample) for k in ks], marker="s", linestyle="--", label="k x sample runs")
    reference = baseline_of(header)
    greedy = [r["seconds"] for r in ok if r["method"] == reference and r["task"] in tasks]
    if greedy:
        ax.axhline(statistics.median(greedy), color="gray", linestyle=":",
                   label=f"one greedy run ({BASELINE_NAMES[reference]})")
    ax.set_xlabel("k (drafts)")
    ax.set_ylabel("median latency per prompt (s)")
    ax.set_xticks(ks)
    ax.set_title(f"Superposed decoding latency vs k ({', '.join(sorted(tasks))})")
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return True


def write_report(out_dir) -> str:
    """Write report.md and the plots into out_dir from its results.jsonl; return the markdown."""
    import matplotlib
    matplotlib.use("Agg")
    out_dir = Path(out_dir)
    header, rows = read_results(out_dir / RESULTS_NAME)
    analysis = analyse(header, rows)
    plots = []
    for name, made in ((SPEEDUP_PNG, lambda p: plot_speedup(analysis, p)),
                       (HISTOGRAM_PNG, lambda p: plot_histograms(analysis, p)),
                       (SPD_PNG, lambda p: plot_spd_latency(header, rows, p))):
        if made(out_dir / name):
            plots.append(name)
    text = render_report(header, rows, plots)
    tmp = out_dir / f".{REPORT_NAME}.{os.getpid()}.tmp"
    tmp.write_text(text)
    os.replace(tmp, out_dir / REPORT_NAME)
    return text
