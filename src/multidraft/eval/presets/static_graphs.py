"""The static runner (static KV cache + CUDA graphs) against the eager one and HF, on a CUDA GPU (issue 22).

    multidraft bench static_graphs --out DIR [--sections forward,greedy,exact,pld]
                                       [--smol smollm2-135m=PATH.gguf --prompts-file code_edit.json]

Sections (each writes DIR/static_graphs.json and .md as soon as it ends, so a time limit keeps what ran):
- forward: a random-weight model of Qwen2.5-1.5B's shape in bf16; after a 256-token prefill, the median ms of a
  forward of n = 1..64 new tokens (chain) and of a 64-node tree (8 chains of 8) for three runners sharing one
  model: "fast" (HF modeling + DynamicCache, cuDNN SDPA off: what CUDA ran before), "static, no graphs" (the
  static cache, ordinary calls) and "static" (CUDA graph replays).
- greedy: the same model, tok/s of HF eager greedy (model.generate), our greedy on "fast" and on "static".
- exact: the same shape in fp32, every lossless method on the static runner against greedy on "fast".
- pld: SmolLM2-135M (--smol) on code_edit prompts (--prompts-file: JSON list of chat messages lists), tok/s of
  HF greedy, HF prompt lookup, and greedy / pld / pld_plus on "fast" and "static"; token equality with greedy.
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
from multidraft.eval.bench_args import add_dtype_argument, dtype_choice
from multidraft.eval.presets import check_gpu as gpu_check    # random model, HF peers, method cases
from multidraft.eval.presets.source_tree import tests_module
from multidraft.eval.timing import Span
from multidraft.methods import METHODS
from multidraft.models.runner import LM

CHAINS = (1, 2, 4, 8, 16, 32, 64)
TREE = [-1 if i % 8 == 0 else i - 1 for i in range(64)]


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def runners_of(lm: LM) -> dict[str, LM]:
    """Three LMs over one HF model: eager ("fast"), static without graphs, static with graphs."""
    fast = LM(lm.model, lm.tokenizer, name=lm.name, runner="fast")
    nographs = LM(lm.model, lm.tokenizer, name=lm.name, runner="static")
    if nographs._static is not None:
        nographs._static.graphs.clear()
    static = LM(lm.model, lm.tokenizer, name=lm.name, runner="static")
    return {"fast": fast, "static, no graphs": nographs, "static": static}


def forward_curve(lms: dict[str, LM], repeats: int) -> dict:
    prefix = [(1000 + i) % 150000 for i in range(256)]
    caches = {}
    for label, lm in lms.items():
        cache = lm.new_cache()
        lm.forward(cache, prefix, logits_rows=slice(-1, None))
        caches[label] = cache
    shapes = [(f"chain {n}", [2000 + i for i in range(n)], None) for n in CHAINS] + [("tree 8x8", list(range(2000, 2064)), TREE)]
    table = {label: {} for label in lms}
    for shape, tokens, parents in shapes:
        for label, lm in lms.items():            # interleaved shape by shape: drift hits every runner alike
            times = []
            for _ in range(repeats + 3):
                with Span(sync=sync) as span:
                    lm.forward(caches[label], tokens, parents=parents)
                times.append(span.seconds)
                caches[label].crop(len(prefix))
            table[label][shape] = round(statistics.median(times[3:]) * 1000, 3)
    return table


def greedy_speed(lms: dict[str, LM], prompts, max_new_tokens: int) -> dict:
    rows = {}
    base = lms["fast"]
    gpu_check.hf_generate(base, prompts[0], 4)
    tokens, seconds = 0, 0.0
    hf_tokens = []
    for prompt in prompts:
        out, s = gpu_check.timed(lambda: gpu_check.hf_generate(base, prompt, max_new_tokens))
        tokens, seconds = tokens + len(out), seconds + s
        hf_tokens.append(out)
    rows["hf_greedy"] = {"tokens": tokens, "seconds": round(seconds, 3), "tok_s": round(tokens / seconds, 1)}
    for label in ("fast", "static"):
        lm = lms[label]
        multidraft.generate(lm, prompts[0], max_new_tokens=4)
        tokens, seconds, equal = 0, 0.0, 0
        for prompt, reference in zip(prompts, hf_tokens):
            out, s = gpu_check.timed(lambda: multidraft.generate(lm, prompt, max_new_tokens=max_new_tokens))
            tokens, seconds = tokens + len(out.token_ids), seconds + s
            equal += out.token_ids == reference
        rows[f"greedy ({label})"] = {"tokens": tokens, "seconds": round(seconds, 3),
                                     "tok_s": round(tokens / seconds, 1), "equal_hf_greedy": f"{equal}/{len(prompts)}"}
    hf = rows["hf_greedy"]["tok_s"]
    for row in rows.values():
        row["x_hf_greedy"] = round(row["tok_s"] / hf, 2)
    return rows


def exactness(lms: dict[str, LM], prompts, max_new_tokens: int) -> dict:
    fast, static = lms["fast"], lms["static"]
    reference = [multidraft.generate(fast, p, max_new_tokens=max_new_tokens).token_ids for p in prompts]
    rows = {}
    for label, method, options in gpu_check.method_cases(static):
        if not METHODS[method].lossless:
            continue
        try:
            outs = [multidraft.generate(static, p, method=method, max_new_tokens=max_new_tokens, **options).token_ids
                    for p in prompts]
            rows[label] = f"{sum(o == r for o, r in zip(outs, reference))}/{len(prompts)}"
        except Exception as exc:
            rows[label] = f"error: {type(exc).__name__}: {exc}"
    return rows


def pld_speed(lms: dict[str, LM], prompts, max_new_tokens: int) -> dict:
    base = lms["fast"]
    prompt_ids = [base.encode(p) for p in prompts]
    rows, greedy_tokens = {}, None
    peers = {"hf_greedy": {}, "hf_prompt_lookup": dict(prompt_lookup_num_tokens=10)}
    for label, kwargs in peers.items():
        gpu_check.hf_generate(base, prompt_ids[0], 4, **kwargs)
        outs, seconds = [], 0.0
        for ids in prompt_ids:
            out, s = gpu_check.timed(lambda: gpu_check.hf_generate(base, ids, max_new_tokens, **kwargs))
            outs.append(out)
            seconds += s
        rows[label] = {"tokens": sum(map(len, outs)), "seconds": round(seconds, 3), "outs": outs}
    for runner in ("fast", "static"):
        lm = lms[runner]
        for method in ("greedy", "pld", "pld_plus"):
            multidraft.generate(lm, prompt_ids[0], method=method, max_new_tokens=4)
            outs, seconds, accepted = [], 0.0, []
            for ids in prompt_ids:
                gen, s = gpu_check.timed(lambda: multidraft.generate(lm, ids, method=method,
                                                                    max_new_tokens=max_new_tokens))
                outs.append(gen.token_ids)
                seconds += s
                accepted.append(gen.stats.mean_acceptance_length)
            rows[f"{method} ({runner})"] = {"tokens": sum(map(len, outs)), "seconds": round(seconds, 3),
                                            "outs": outs, "mal": round(statistics.mean(accepted), 2)}
            if runner == "fast" and method == "greedy":
                greedy_tokens = outs
    hf, hf_pl = (rows[k]["tokens"] / rows[k]["seconds"] for k in ("hf_greedy", "hf_prompt_lookup"))
    for row in rows.values():
        outs = row.pop("outs")
        row["tok_s"] = round(row["tokens"] / row["seconds"], 1)
        row["x_hf_greedy"] = round(row["tok_s"] / hf, 2)
        row["x_hf_prompt_lookup"] = round(row["tok_s"] / hf_pl, 2)
        row["equal_greedy"] = f"{sum(o == g for o, g in zip(outs, greedy_tokens))}/{len(outs)}"
    return rows


def markdown(report: dict) -> str:
    lines = [f"# static runner on {report['device']}", "", f"`{report['command']}`", ""]
    for section, body in report["sections"].items():
        lines.append(f"## {section}")
        if isinstance(body, dict) and body and all(isinstance(v, dict) for v in body.values()):
            columns = list(dict.fromkeys(k for v in body.values() for k in v))
            lines.append("| | " + " | ".join(columns) + " |")
            lines.append("|---" * (len(columns) + 1) + "|")
            for name, row in body.items():
                lines.append(f"| {name} | " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
        else:
            lines.append("```\n" + json.dumps(body, indent=1) + "\n```")
        lines.append("")
    return "\n".join(lines)


def add_arguments(parser) -> None:
    parser.add_argument("--out", required=True)
    parser.add_argument("--sections", default="forward,greedy,exact,pld")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--smol", default="smollm2-135m")
    parser.add_argument("--prompts-file", default=None)
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    add_dtype_argument(parser)
    parser.add_argument("--tiny", action="store_true", help="a CPU dry run of this script on a tiny random model")


def run(args) -> int:
    random_model = gpu_check.random_qwen
    if args.tiny:
        gpu_check.DEVICE = "cpu"
        make_tiny_lm = tests_module("tiny_models").make_tiny_lm

        def random_model(dtype):
            lm = make_tiny_lm("llama", seed=2, vocab_size=48000, max_position_embeddings=1024)
            lm.model.to(dtype)
            return LM(lm.model, lm.tokenizer, name="tiny")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sections = args.sections.split(",")
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else platform.processor() or "cpu"
    report = {"device": device, "torch": torch.__version__, "command": " ".join(sys.argv), "sections": {},
              "setup_s": {}}

    def save():
        (out / "static_graphs.json").write_text(json.dumps(report, indent=1))
        (out / "static_graphs.md").write_text(markdown(report))

    def section(name, fn):
        clock = Span.start()
        try:
            report["sections"][name] = fn()
        except Exception as exc:
            report["sections"][name] = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        print(f"{name}: {clock.elapsed():.0f} s", flush=True)
        print(json.dumps(report["sections"][name], indent=1)[:3000], flush=True)
        save()

    if {"forward", "greedy"} & set(sections):
        lms = runners_of(random_model(torch.bfloat16))
        report["setup_s"]["random 1.5B bf16"] = {k: round(v.runner_setup_seconds, 2) for k, v in lms.items()}
        report["runners"] = {k: v.runner for k, v in lms.items()}
        if "forward" in sections:
            section("forward cost, random Qwen2.5-1.5B shape, bf16, ms (median)",
                    lambda: forward_curve(lms, args.repeats))
        if "greedy" in sections:
            section("greedy, random Qwen2.5-1.5B shape, bf16, 3 prompts x 128 tokens",
                    lambda: greedy_speed(lms, gpu_check.random_prompts(3), 128))
        del lms
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if "exact" in sections:
        lms = runners_of(random_model(torch.float32))
        section("exactness, random Qwen2.5-1.5B shape, fp32, static runner vs greedy on fast (equal/prompts)",
                lambda: exactness(lms, gpu_check.random_prompts(2), 32))
        del lms
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if "pld" in sections:
        name, _, path = args.smol.partition("=")
        base = multidraft.load_model(path or name, dtype=dtype_choice(args.dtype), device=gpu_check.DEVICE)
        base.name = name
        lms = runners_of(base)
        report["setup_s"][f"{name} {args.dtype}"] = {k: round(v.runner_setup_seconds, 2) for k, v in lms.items()}
        prompts = json.loads(Path(args.prompts_file).read_text())[: args.prompts]
        section(f"pld, {name}, {args.dtype}, code_edit, {len(prompts)} prompts x {args.max_new_tokens} tokens",
                lambda: pld_speed(lms, prompts, args.max_new_tokens))
    save()
    return 0

