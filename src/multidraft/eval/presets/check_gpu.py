"""Check a CUDA machine end to end: every method on the GPU, token equality with greedy, speed beside HF.

    multidraft check gpu --out OUT_DIR [--model NAME[=PATH] ...] [--dtypes float32,bfloat16]
                                   [--prompts 3] [--max-new-tokens 64]

--model takes a registry alias, an HF folder or a GGUF file (NAME=PATH loads PATH and calls it NAME, so the
shipped PLD+ calibration of NAME applies), or `random-qwen2.5-1.5b`: a random-weight model of Qwen2.5-1.5B's
shape built from a config (no files needed; right for correctness and for the cost of a forward).
Default: `random-qwen2.5-1.5b` and `smollm2-135m`.

For every model and dtype it reports:
1. the SDPA flags and the attention kernels a profile shows for a 16-token chain and a 64-node tree forward,
   with torch's default backend choice and with cuDNN SDPA off (what `multidraft.load_model` sets on CUDA);
2. forward cost: n = 1..64 new tokens (chain) and an 8x8 tree after a 256-token prefill, under both settings;
3. every registered method on the same prompts: tokens equal to `greedy` (lossless methods must be), tok/s,
   ratio to HF greedy, mean acceptance length; HF greedy / prompt lookup / assisted beside them;
4. at temperature 0.8: which methods give the very tokens of `method="sample"` with the same seed;
5. a few methods again with cuDNN SDPA on (end-to-end effect of the backend).
Draft-model methods and HF assisted use the target itself as the draft (acceptance ~1 at temperature 0): there
they measure the loop's overhead, not a real speedup. Writes OUT_DIR/gpu_check.json and gpu_check.md.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import traceback
from pathlib import Path

import torch

import multidraft
from multidraft.eval import hf_peers, timing
from multidraft.eval.bench_args import add_device_argument
from multidraft.eval.presets.source_tree import tests_module
from multidraft.models.device import attention_kernels, sdpa_backends
from multidraft.models.runner import LM
from multidraft.pldplus.calibration import load_record

# Input-guided prompts (edits, summaries: prompt lookup pays) and one open question (it does not).
PROMPTS = [
    "Add type hints to this Python function and keep everything else identical.\n\n"
    "def merge_intervals(intervals):\n    intervals = sorted(intervals, key=lambda pair: pair[0])\n"
    "    merged = []\n    for start, end in intervals:\n        if merged and start <= merged[-1][1]:\n"
    "            merged[-1][1] = max(merged[-1][1], end)\n        else:\n            merged.append([start, end])\n"
    "    return merged\n\ndef total_length(intervals):\n    return sum(end - start for start, end in "
    "merge_intervals(intervals))\n\nThe function with type hints:\n",
    "Rewrite the following paragraph in the past tense, changing nothing else.\n\nThe team ships a new release "
    "every month. Each release goes through three rounds of review, and the reviewers check that every change "
    "has a test. When a test fails, the release waits until the failure is understood and fixed. Users get a "
    "short note that lists what changed and why.\n\nRewritten paragraph:\n",
    "Summarize in two sentences: The city council met on Tuesday to discuss the new bus routes. The council "
    "agreed that the routes through the old town will run every ten minutes from next spring, and that the night "
    "bus will also stop at the hospital. Residents who asked for a stop near the school were told that the "
    "council will study it next year.\n\nSummary:\n",
    "What are three good habits for writing readable code? Answer briefly.",
]
SAMPLING = dict(temperature=0.8, seed=1)
SAMPLING_CASES = ("pld", "pld_plus(hidden)", "pld_plus(attention)", "speculative", "multi_draft(specinfer)", "mtad")
DEVICE = "cuda"          # --device cpu gives a dry run of this script on a CPU box (tiny models, no profiles)


def sync() -> None:
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


class IdTokenizer:
    """Stand-in tokenizer of a random-weight model: prompts are token ids, text is the ids."""

    eos_token_id = None
    chat_template = None

    def __init__(self, vocab_size: int):
        self.vocab_size = vocab_size

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(int(i)) for i in ids)

    def __len__(self):
        return self.vocab_size


def random_qwen(dtype: torch.dtype) -> LM:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
                         num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                         rope_theta=1_000_000.0, tie_word_embeddings=True, eos_token_id=None, bos_token_id=None)
    config._attn_implementation = "sdpa"
    with torch.device(DEVICE):
        model = Qwen2ForCausalLM(config).to(dtype).eval()
    return LM(model, IdTokenizer(config.vocab_size), name="random-qwen2.5-1.5b")


def random_prompts(count: int) -> list[list[int]]:
    """Token-id prompts with repeats (so prompt lookup has something to find)."""
    generator = torch.Generator().manual_seed(7)
    prompts = []
    for index in range(count):
        block = torch.randint(1000, 30000, (48,), generator=generator).tolist()
        prompts.append(block + block[:20] + torch.randint(1000, 30000, (16,), generator=generator).tolist() + block[:8])
    return prompts


def load(spec: str, dtype: str) -> tuple[LM, list]:
    torch_dtype = getattr(torch, dtype)
    if spec == "random-qwen2.5-1.5b":
        return random_qwen(torch_dtype), None
    if spec == "tiny-random":                           # dry runs of this script
        lm = tests_module("tiny_models").make_tiny_lm("llama", seed=2)
        lm.model.to(DEVICE, torch_dtype)
        return lm, None
    name, _, path = spec.partition("=")
    lm = multidraft.load_model(path or name, dtype=torch_dtype, device=DEVICE)
    lm.name = name               # so the shipped PLD+ calibration of NAME is found
    return lm, None


def heads_for(lm: LM):
    """Random blockwise heads (greedy matching keeps the output exact whatever the heads draft)."""
    from multidraft.blockwise import BlockwiseHeads

    torch.manual_seed(0)
    heads = BlockwiseHeads(4, lm.hidden_size, 64)
    with torch.no_grad():
        heads.w2.normal_(0, 0.5 / 8)
    heads.meta["hidden_layer"] = lm.num_layers
    return heads.eval().requires_grad_(False).bind(lm)


def method_cases(lm: LM) -> list[tuple[str, str, dict]]:
    """(label, method, options) for every registered method."""
    from multidraft.verify.multi_draft import SELECTION_SCHEMES

    methods = multidraft.available_methods()
    cases = []
    for name in sorted(methods):
        if name == "sample":
            continue                                  # compared in the sampling section
        if name == "beam":
            cases.append(("beam", name, dict(num_beams=4)))
        elif name == "pld_plus":
            cases.append(("pld_plus(hidden)", name, {}))
            heads = None
            if load_record(lm.name) is None:          # not calibrated: a few heads of the middle layers
                middle = lm.num_layers // 2
                heads = [(layer, head) for layer in (middle, middle + 1) for head in range(4)]
            cases.append(("pld_plus(attention)", name, dict(rank_by="attention", induction_heads=heads)))
        elif name == "speculative":
            cases.append(("speculative", name, dict(draft_model=lm)))
        elif name == "multi_draft":
            for scheme in SELECTION_SCHEMES:
                cases.append((f"multi_draft({scheme})", name, dict(draft_model=lm, selection=scheme)))
        elif name == "mtad":
            cases.append(("mtad", name, dict(draft_model=lm)))
        elif name == "superposed":
            cases.append(("superposed(alpha=0)", name, dict(alpha=0.0)))
        elif name == "blockwise":
            cases.append(("blockwise(random heads)", name, dict(heads=heads_for(lm), rescoring="none", lattice_k=4,
                                                                num_paths=2)))
        else:
            cases.append((name, name, {}))
    return cases


def timed(fn):
    """(fn()'s result, wall seconds), the device synchronised at both ends."""
    result, span = timing.timed(fn, sync=sync)
    return result, span.seconds


def hf_generate(lm: LM, prompt_ids, max_new_tokens: int, **kwargs):
    """HF generate()'s tokens (pad 0: random-weight models have no pad token); the callers time it with sync."""
    return hf_peers.hf_generate(lm, prompt_ids, max_new_tokens, min_new_tokens=0, pad_token_id=0, **kwargs)[0]


def ids(lm: LM, start: int, count: int) -> list[int]:
    return [(start + i) % lm.vocab_size for i in range(count)]


def prefilled(lm: LM):
    """A cache holding a 256-token prefix (less on a tiny dry-run model)."""
    cache, _ = lm.prefill(ids(lm, 1000, min(256, lm.context_length - 128)))
    return cache, cache.length


def forward_costs(lm: LM, repeats: int = 10) -> dict:
    """Median ms of a forward of n new tokens (chain) and of a 64-node tree (8 chains of 8), 256-token prefill."""
    cache, prefix = prefilled(lm)
    costs = {}
    tree_parents = [-1 if i % 8 == 0 else i - 1 for i in range(64)]
    shapes = [(f"chain {n}", ids(lm, 2000, n), None) for n in (1, 2, 4, 8, 16, 32, 64)]
    shapes.append(("tree 8x8", ids(lm, 2000, 64), tree_parents))
    for label, tokens, parents in shapes:
        times = []
        for _ in range(repeats + 2):
            _, seconds = timed(lambda: lm.forward(cache, tokens, parents=parents))
            cache.crop(prefix)
            times.append(seconds)
        costs[label] = statistics.median(times[2:]) * 1000
    return costs


def kernels(lm: LM) -> dict:
    cache, prefix = prefilled(lm)
    out = {}
    for label, tokens, parents in (("chain 16", ids(lm, 2000, 16), None),
                                   ("tree 8x8", ids(lm, 2000, 64), [-1 if i % 8 == 0 else i - 1 for i in range(64)]),
                                   ("1 token", ids(lm, 2000, 1), None)):
        def run():
            lm.forward(cache, tokens, parents=parents)
            cache.crop(prefix)
        run()
        out[label] = attention_kernels(run)
    return out


def set_cudnn(enabled: bool) -> None:
    if DEVICE.startswith("cuda"):
        torch.backends.cuda.enable_cudnn_sdp(enabled)


def run_methods(lm, prompts, max_new_tokens, cases, record) -> dict:
    """Every case on every prompt; returns label -> list of per-prompt rows."""
    results = {}
    greedy = {}
    for label, method, options in [("greedy", "greedy", {})] + [c for c in cases if c[0] != "greedy"]:
        rows = []
        try:
            multidraft.generate(lm, prompts[0], method=method, max_new_tokens=4, **options)   # warm-up
            for index, prompt in enumerate(prompts):
                gen, seconds = timed(lambda: multidraft.generate(lm, prompt, method=method,
                                                                 max_new_tokens=max_new_tokens, **options))
                row = {"prompt": index, "tokens": gen.token_ids, "seconds": seconds,
                       "tok_s": len(gen.token_ids) / seconds, "mal": gen.stats.mean_acceptance_length,
                       "target_calls": gen.stats.target_calls}
                if label == "greedy":
                    greedy[index] = gen.token_ids
                row["equal_greedy"] = gen.token_ids == greedy.get(index)
                row["first_diff"] = first_difference(gen.token_ids, greedy.get(index, []))
                rows.append(row)
        except Exception as exc:            # one broken method must not hide the others
            rows = [{"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=6)}]
        results[label] = rows
        record(label, rows)
    return results


def run_hf(lm, prompts, max_new_tokens, greedy, record, labels=("hf_greedy", "hf_prompt_lookup", "hf_assisted")) -> dict:
    peers = {"hf_greedy": {}, "hf_prompt_lookup": dict(prompt_lookup_num_tokens=10),
             "hf_assisted": dict(assistant_model=lm.model)}
    results = {}
    for label in labels:
        kwargs = peers[label]
        rows = []
        try:
            hf_generate(lm, prompt_ids(lm, prompts[0]), 4, **kwargs)
            for index, prompt in enumerate(prompts):
                ids = prompt_ids(lm, prompt)
                tokens, seconds = timed(lambda: hf_generate(lm, ids, max_new_tokens, **kwargs))
                rows.append({"prompt": index, "tokens": tokens, "seconds": seconds, "tok_s": len(tokens) / seconds,
                             "equal_greedy": tokens == greedy.get(index),
                             "first_diff": first_difference(tokens, greedy.get(index, []))})
        except Exception as exc:
            rows = [{"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc(limit=6)}]
        results[label] = rows
        record(label, rows)
    return results


def run_sampling(lm, prompts, max_new_tokens, cases, record) -> dict:
    """Temperature 0.8, seed 1: which methods emit exactly the tokens of method='sample'."""
    reference = {i: multidraft.generate(lm, p, method="sample", max_new_tokens=max_new_tokens, **SAMPLING).token_ids
                 for i, p in enumerate(prompts)}
    results = {}
    for label, method, options in cases:
        if label not in SAMPLING_CASES:
            continue                              # greedy-only decoders, and time: one case per kind
        rows = []
        try:
            for index, prompt in enumerate(prompts):
                gen = multidraft.generate(lm, prompt, method=method, max_new_tokens=max_new_tokens, **SAMPLING,
                                          **options)
                rows.append({"prompt": index, "equal_sample": gen.token_ids == reference[index],
                             "first_diff": first_difference(gen.token_ids, reference[index])})
        except Exception as exc:
            rows = [{"error": f"{type(exc).__name__}: {exc}"}]
        results[label] = rows
        record("sampling " + label, rows)
    return results


def prompt_ids(lm, prompt):
    return prompt if isinstance(prompt, list) else lm.encode(prompt)


def first_difference(a, b):
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def summarize(results: dict, hf: dict, lossless: dict) -> list[str]:
    base = [r["tok_s"] for r in hf.get("hf_greedy", []) if "tok_s" in r]
    base_median = statistics.median(base) if base else None
    lines = ["| method | lossless | = greedy (prompts) | first divergence | tok/s (median) | x HF greedy | "
             "mean acceptance length |", "|---|---|---|---|---|---|---|"]
    for label, rows in list(results.items()) + list(hf.items()):
        if rows and "error" in rows[0]:
            lines.append(f"| {label} | {lossless.get(label, '')} | ERROR: {rows[0]['error'][:150]} | | | | |")
            continue
        equal = sum(r["equal_greedy"] for r in rows)
        diffs = [r["first_diff"] for r in rows if r["first_diff"] is not None]
        tok_s = statistics.median(r["tok_s"] for r in rows)
        ratio = f"{tok_s / base_median:.2f}" if base_median else ""
        mal = statistics.mean(r["mal"] for r in rows) if rows and "mal" in rows[0] else None
        lines.append(f"| {label} | {lossless.get(label, '')} | {equal}/{len(rows)} | {diffs or ''} | {tok_s:.1f} | "
                     f"{ratio} | {'' if mal is None else f'{mal:.2f}'} |")
    return lines


def kernel_sections(lm, entry: dict, skip: set) -> list[str]:
    """The attention kernels a profile sees and the forward costs, cuDNN SDPA on and off; markdown lines."""
    md = []
    if "kernels" not in skip:
        entry["kernels"] = {}
        for cudnn in (True, False):
            set_cudnn(cudnn)
            entry["kernels"]["cudnn on (torch default)" if cudnn else "cudnn off (shipped)"] = kernels(lm)
        set_cudnn(False)
        md += ["attention kernels seen in a profile:", "", "```", json.dumps(entry["kernels"], indent=1), "```", ""]
    if "forward" not in skip:
        entry["forward_ms"] = {}
        for cudnn in ((True, False) if DEVICE.startswith("cuda") else (False,)):
            set_cudnn(cudnn)
            entry["forward_ms"]["cudnn on" if cudnn else "cudnn off"] = forward_costs(lm)
        set_cudnn(False)
        labels = list(entry["forward_ms"]["cudnn off"])
        md += ["forward cost, median ms after a 256-token prefill:", "",
               "| SDPA | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
        for key, costs in entry["forward_ms"].items():
            md.append(f"| {key} | " + " | ".join(f"{costs[l]:.1f}" for l in labels) + " |")
        md.append("")
    return md


def sampling_sections(lm, prompts, max_new_tokens, cases, record, entry: dict, skip: set, lossless: dict) -> list[str]:
    """Sampling equality with method='sample', and greedy equality with cuDNN SDPA on; markdown lines."""
    md = []
    if "sampling" not in skip:
        sampling = run_sampling(lm, prompts, max_new_tokens, cases, record)
        entry["sampling"] = sampling
        md += [f"temperature 0.8, seed 1: tokens identical to method='sample' (prompts):", "",
               "| method | = sample | first divergence |", "|---|---|---|"]
        for label, rows in sampling.items():
            if rows and "error" in rows[0]:
                md.append(f"| {label} | ERROR: {rows[0]['error'][:150]} | |")
            else:
                md.append(f"| {label} | {sum(r['equal_sample'] for r in rows)}/{len(rows)} | "
                          f"{[r['first_diff'] for r in rows if r['first_diff'] is not None] or ''} |")
        md.append("")
    if "cudnn" not in skip:
        set_cudnn(True)
        chosen = [c for c in cases if c[0] in ("pld", "pld_plus(hidden)", "speculative")]
        again = run_methods(lm, prompts, max_new_tokens, chosen, lambda *a: None)
        greedy_cudnn = {r["prompt"]: r["tokens"] for r in again["greedy"] if "tokens" in r}
        hf_again = run_hf(lm, prompts, max_new_tokens, greedy_cudnn, lambda *a: None,
                          labels=("hf_greedy", "hf_prompt_lookup"))
        set_cudnn(False)
        entry["cudnn_on"] = {"methods": again, "hf": hf_again}
        md += ["the same with cuDNN SDPA on (torch's default), greedy equality against greedy under cuDNN:", ""]
        md += summarize(again, hf_again, lossless) + [""]
    return md


def add_arguments(parser) -> None:
    parser.add_argument("--out", required=True)
    parser.add_argument("--model", action="append", help="repeatable; default random-qwen2.5-1.5b and smollm2-135m")
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--prompts", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    add_device_argument(parser)       # default here: cuda; cpu for a dry run with --model tiny-random
    parser.add_argument("--skip", default="", help="comma-separated sections to skip: forward,kernels,sampling,cudnn")


def run(args) -> int:
    global DEVICE
    DEVICE = args.device or "cuda"
    skip = set(filter(None, args.skip.split(",")))
    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device: nothing to check (this script is for GPU machines; --device cpu for a dry run)")
        return 2
    if not DEVICE.startswith("cuda"):
        skip |= {"kernels", "cudnn"}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import transformers
    report = {"command": " ".join([sys.executable.split("/")[-1]] + sys.argv),
              "environment": {"gpu": torch.cuda.get_device_name(0) if DEVICE.startswith("cuda") else "none (dry run)",
                              "torch": torch.__version__,
                              "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
                              "transformers": transformers.__version__, "python": platform.python_version()},
              "runs": []}
    md = [f"# gpu_check: {report['environment']['gpu']}", "", f"`{report['command']}`", "",
          "environment: " + json.dumps(report["environment"]), ""]

    def save():
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
        (out / "gpu_check.md").write_text("\n".join(md) + "\n")

    lossless = {}
    for spec in args.model or ["random-qwen2.5-1.5b", "smollm2-135m"]:
        for dtype in args.dtypes.split(","):
            clock = timing.Span.start()
            lm, _ = load(spec, dtype)
            set_cudnn(False)                      # what load_model sets on CUDA (models/device.py)
            prompts = random_prompts(args.prompts) if spec == "random-qwen2.5-1.5b" else PROMPTS[: args.prompts]
            entry = {"model": spec, "dtype": dtype, "sdpa_flags_shipped": sdpa_backends()}
            report["runs"].append(entry)
            md += [f"## {lm.name}, {dtype}", "", f"SDPA flags as shipped (load_model on CUDA): {entry['sdpa_flags_shipped']}", ""]
            md += kernel_sections(lm, entry, skip)
            save()
            cases = method_cases(lm)
            for label, method, _ in cases:
                lossless[label] = "yes" if multidraft.available_methods()[method].lossless else "no"
            lossless["greedy"] = "yes"

            def record(label, rows):
                entry.setdefault("methods", {})[label] = rows
                save()
                status = rows[0].get("error", "") if rows and "error" in rows[0] else \
                    f"{sum(r.get('equal_greedy', r.get('equal_sample', False)) for r in rows)}/{len(rows)} equal"
                print(f"[{lm.name} {dtype}] {label}: {status}", flush=True)

            results = run_methods(lm, prompts, args.max_new_tokens, cases, record)
            greedy = {r["prompt"]: r["tokens"] for r in results["greedy"]}
            hf = run_hf(lm, prompts, args.max_new_tokens, greedy, record)
            md += [f"methods (SDPA without cuDNN, {len(prompts)} prompts, max_new_tokens {args.max_new_tokens}):", ""]
            md += summarize(results, hf, lossless) + [""]
            md += sampling_sections(lm, prompts, args.max_new_tokens, cases, record, entry, skip, lossless)
            entry["seconds"] = clock.elapsed()
            save()
            del lm
            torch.cuda.empty_cache()
    save()
    print("\n".join(md))
    return 0

