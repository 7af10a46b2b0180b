"""Seed 003 (MTAD) experiments that run here: exact MTJD vs its beam approximations, and MTAD on a real model.

    PYTHONPATH=src:benchmarks:. .venv/bin/python benchmarks/results/2026-11-23-mtad/mtad_paper.py exact --json benchmarks/results/2026-11-23-mtad/mtad_exact.json
    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/results/2026-11-23-mtad/mtad_paper.py real --prompts 4 --tokens 64 \
        --json benchmarks/results/2026-11-23-mtad/mtad_real.json

`exact` (Theorem 3.2 / Fig. 1, Corollary 3.3, Theorem 3.5): on a toy 12-token random Llama (tests/tiny_models.py),
greedy decoding, exact greedy MTJD (joint argmax over all V^gamma blocks, decoders/mtjd.py), beam-approximated
MTJD (beam search over the target itself with k beams, run as MTAD with draft = target and tau 0.99, which
accepts every block) and MTAD-greedy with a perturbed draft, for gamma = 1..4. Metric: per-token log-perplexity
of the output under the unwarped target (lower is better), per prompt, averaged. All at temperature 0.

`real`: SmolLM2-135M target (the only model pulled), draft = its first 28 of 30 layers + final norm + LM head (a
layer-skip draft, same tokenizer). Sampled decoding under the paper's warp (T 1, top-k 20 then top-p 0.9,
Appendix F) unless a row says otherwise: target-only sampling, speculative (gamma 4), SpecInfer and SpecTr
(K 2, gamma 4) and MTAD (gamma 4, 8 beams, tau 0.1); the tau sweep (Fig. 3), the beam-count ablation (Table 7)
and the warp ablation (Table 10). Metrics: perplexity (per-sample mean log-prob of the generated tokens under the
unwarped target, averaged over samples, exponentiated: the paper's convention), block efficiency, and a COUNTED
cost model per generated token (no joules are measured here, there is no GPU power meter on this machine):
FLOPs = 2 N n + 4 L d n (P + n) per forward of n new tokens over P cached ones, bytes = weight bytes (once per
forward) + KV-cache bytes read and written; energy = FLOPs x e_flop + bytes x e_byte with stated, assumed
constants (`--pj-per-flop`, `--pj-per-byte`), which is the paper's eq. (9) with counted operations in place of
measured power.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

import multidraft
from multidraft.decoders.mtjd import exact_greedy_mtjd, sequence_logprob
from multidraft.fsutil import atomic_path
from multidraft.models.runner import LM
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-23-selection"))    # selection_laws.py
from selection_laws import real_prompt_texts  # noqa: E402

PAPER_WARP = {"temperature": 1.0, "top_k": 20, "top_p": 0.9}


# ----------------------------------------------------------------------------------------------------------------
# exact MTJD on a toy vocabulary
# ----------------------------------------------------------------------------------------------------------------

def run_exact(args):
    from tests.test_draft_model import perturbed_copy
    from tests.tiny_models import make_tiny_hf_model, make_tokenizer

    target = LM(make_tiny_hf_model("llama", seed=13, vocab_size=12), make_tokenizer(), name="tiny-12")
    draft = perturbed_copy(target, args.draft_noise, seed=2)
    prompts = [[3, 4, 5, 6], [7, 8, 9], [5, 5, 4], [10, 3, 7, 7], [6, 11, 4], [9, 9, 3], [4, 7], [11, 10, 8]]
    prompts = prompts[: args.prompts]
    tokens = args.tokens
    rows: dict[str, list[float]] = {}

    def record(label, prompt, out):
        nll = -sequence_logprob(target, prompt, out) / max(1, len(out))
        rows.setdefault(label, []).append(nll)

    start = time.perf_counter()
    for prompt in prompts:
        record("greedy", prompt, multidraft.generate(target, prompt, max_new_tokens=tokens).token_ids)
        for gamma in (1, 2, 3, 4):
            exact, _ = exact_greedy_mtjd(target, prompt, [gamma, 1], tokens, eos_token_id=2)
            record(f"exact MTJD, blocks ({gamma},1)", prompt, exact)
            for beams in (1, 2, 4, 8):
                out = multidraft.generate(target, prompt, method="mtad", max_new_tokens=tokens, draft_model=target,
                                          num_beams=beams, num_draft_tokens=gamma, accept_threshold=0.99)
                record(f"beam MTJD on the target, gamma {gamma}, {beams} beams", prompt, out.token_ids)
            for beams in (1, 8):
                out = multidraft.generate(target, prompt, method="mtad", max_new_tokens=tokens, draft_model=draft,
                                          num_beams=beams, num_draft_tokens=gamma, accept_threshold=0.1)
                record(f"MTAD-greedy (perturbed draft, tau 0.1), gamma {gamma}, {beams} beams", prompt,
                       out.token_ids)
        print(f"prompt {prompt}: {time.perf_counter() - start:.0f} s", flush=True)
    summary = {label: statistics.fmean(v) for label, v in rows.items()}
    print(f"\nmean per-token NLL under the target (log-perplexity), {len(prompts)} prompts x {tokens} tokens, T = 0")
    for label, value in summary.items():
        print(f"  {label:>70}: {value:.4f}  (PPL {math.exp(value):.3f})")
    return {"mean_nll": summary, "per_prompt_nll": rows}


# ----------------------------------------------------------------------------------------------------------------
# real model: counted cost and quality
# ----------------------------------------------------------------------------------------------------------------

class ForwardCounter:
    """Counts new tokens and cached positions of every forward of an HF model (a forward pre-hook)."""

    def __init__(self, lm: LM):
        config = lm.model.config
        self.params = sum(p.numel() for p in lm.model.parameters())
        self.bytes_per_param = lm.model.dtype.itemsize if hasattr(lm.model, "dtype") else 4
        self.layers = len(lm.model.model.layers)
        self.width = config.hidden_size
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.kv_width = 2 * config.num_key_value_heads * head_dim       # K and V per layer per position
        self.reset()
        lm.model.register_forward_pre_hook(self._hook, with_kwargs=True)

    def reset(self):
        self.forwards = 0
        self.flops = 0.0
        self.bytes = 0.0

    def _hook(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        new = int(ids.shape[-1]) if ids is not None else int(kwargs["inputs_embeds"].shape[1])
        cache = kwargs.get("past_key_values")
        past = int(cache.get_seq_length()) if cache is not None else 0
        self.forwards += 1
        self.flops += 2 * self.params * new + 4 * self.layers * self.width * new * (past + new)
        kv_bytes = self.layers * self.kv_width * self.bytes_per_param
        self.bytes += self.params * self.bytes_per_param + kv_bytes * (past + new)


def layer_skip_draft(lm: LM, layers: int) -> LM:
    model = copy.deepcopy(lm.model)
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    return LM(model, lm.tokenizer, name=f"{lm.name}-first{layers}layers")


def real_pair_and_prompts(args) -> tuple[LM, LM, list[list[int]]]:
    """Target (--model), draft (--draft-model, else the target's first --draft-layers layers) and the token ids of
    the real prompts (--prompts per task, last 256 tokens), in fp32."""
    target = multidraft.load_model(args.model, dtype=torch.float32)
    draft = (multidraft.load_model(args.draft_model, dtype=torch.float32) if args.draft_model
             else layer_skip_draft(target, args.draft_layers))
    return target, draft, [target.encode(t)[-256:] for t in real_prompt_texts(args.prompts)]


def real_settings(args, small=False):
    """(table, label, method, options); `small`: the main comparison only."""
    base = dict(PAPER_WARP)
    mtad = {"num_draft_tokens": 4, "num_beams": 8, "accept_threshold": 0.1}
    yield "Table 4 (main)", "sample (target only)", "sample", base
    yield "Table 4 (main)", "speculative, gamma 4", "speculative", {**base, "num_draft_tokens": 4}
    yield "Table 4 (main)", "SpecInfer, K 2, gamma 4", "multi_draft", {**base, "num_drafts": 2,
                                                                      "num_draft_tokens": 4, "selection": "specinfer"}
    yield "Table 4 (main)", "SpecTr, K 2, gamma 4", "multi_draft", {**base, "num_drafts": 2, "num_draft_tokens": 4,
                                                                   "selection": "spectr"}
    yield "Table 4 (main)", "BiLD, 10 tokens, fallback 0.9, rollback 2 (LOSSY)", "bild", base
    yield "Table 4 (main)", "MTAD, gamma 4, 8 beams, tau 0.1 (LOSSY)", "mtad", {**base, **mtad}
    if small:
        return
    # tau 0.1, 8 beams and the (20, 0.9) warp are the main MTAD row above (CPU time is scarce here)
    for tau in ((0.0, 0.3, 0.5, 0.7, 0.9, 1.0) if args.mode == "toy" else (0.0, 0.5, 0.9, 1.0)):
        yield "Fig. 3 (tau)", f"tau {tau}", "mtad", {**base, **mtad, "accept_threshold": tau}
    for beams in (1, 2, 4, 6):
        yield "Table 7 (beams)", f"{beams} beams", "mtad", {**base, **mtad, "num_beams": beams}
    for top_k, top_p in ((20, 0.8), (10, 0.9), (10, 0.8)):
        warp = {"temperature": 1.0, "top_k": top_k, "top_p": top_p}
        yield "Table 10 (warp)", f"k {top_k}, p {top_p}: sample", "sample", warp
        yield "Table 10 (warp)", f"k {top_k}, p {top_p}: MTAD", "mtad", {**warp, **mtad}
    yield "greedy (T 0)", "greedy", "greedy", {}
    yield "greedy (T 0)", "MTAD-greedy, 1 beam", "mtad", {**mtad, "num_beams": 1}
    yield "greedy (T 0)", "MTAD-greedy, 8 beams", "mtad", mtad


def run_real(args):
    if args.mode == "toy":
        from tests.test_draft_model import perturbed_copy
        from tests.tiny_models import make_tiny_lm

        target = make_tiny_lm("llama", seed=6)
        with torch.no_grad():              # random weights give near-uniform laws: sharpen them to look like an LM's
            target.model.lm_head.weight.mul_(args.toy_sharpness)
        draft = perturbed_copy(target, args.draft_noise, seed=2)
        generator = torch.Generator().manual_seed(args.seed)
        prompts = [torch.randint(3, target.vocab_size, (6,), generator=generator).tolist()
                   for _ in range(args.prompts)]
    else:
        target, draft, prompts = real_pair_and_prompts(args)
    counters = {"target": ForwardCounter(target), "draft": ForwardCounter(draft)}
    results: dict = {}
    start = time.perf_counter()
    for table, label, method, options in real_settings(args, small=args.small):
        if args.only and not any(part in f"{table} | {label}" for part in args.only):
            continue
        nlls, tokens, calls, flops, moved, seconds = [], 0, 0, 0.0, 0.0, 0.0
        forwards = {"target": 0, "draft": 0}
        for index, prompt in enumerate(prompts):
            for counter in counters.values():
                counter.reset()
            extra = {"draft_model": draft} if method in ("speculative", "multi_draft", "mtad", "bild") else {}
            seed = {"seed": args.seed + index} if options.get("temperature", 0) > 0 else {}
            out = multidraft.generate(target, prompt, method=method, max_new_tokens=args.tokens, **options,
                                      **extra, **seed)
            ids = out.token_ids
            nlls.append(-sequence_logprob(target, prompt, ids) / max(1, len(ids)))
            tokens += len(ids)
            calls += out.stats.verification_calls
            seconds += out.stats.total_time
            # counted per prompt: the prefill, every decode forward, and the scoring forward of sequence_logprob
            # (one full-sequence target forward): the prefill and scoring forwards are the same for every method
            flops += sum(c.flops for c in counters.values())
            for name, counter in counters.items():
                forwards[name] += counter.forwards
            moved += sum(c.bytes for c in counters.values())
        energy_pj = flops * args.pj_per_flop + moved * args.pj_per_byte
        row = {"ppl": math.exp(statistics.fmean(nlls)), "block_efficiency": tokens / calls if calls else 0.0,
               "gflops_per_token": flops / tokens / 1e9, "mb_moved_per_token": moved / tokens / 1e6,
               "counted_mj_per_token": energy_pj / tokens / 1e9, "tokens": tokens,
               "cpu_tokens_per_s": tokens / seconds if seconds else 0.0,
               "target_forwards_per_token": forwards["target"] / tokens,
               "draft_forwards_per_token": forwards["draft"] / tokens, "nll_per_prompt": nlls}
        results.setdefault(table, {})[label] = row
        write_json(args, {"results": results, "target": target.name, "draft": draft.name, "finished": False})
        print(f"{table:>16} | {label:>42} | PPL {row['ppl']:.3f} | BE {row['block_efficiency']:.2f} | "
              f"{row['gflops_per_token']:.2f} GFLOP/tok | {row['mb_moved_per_token']:.0f} MB/tok | "
              f"{row['counted_mj_per_token']:.2f} mJ/tok (counted) | fwd/tok target {row['target_forwards_per_token']:.2f}"
              f" draft {row['draft_forwards_per_token']:.2f} | {row['cpu_tokens_per_s']:.1f} tok/s CPU "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    return {"results": results, "target": target.name, "draft": draft.name}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["exact", "real", "toy"])
    parser.add_argument("--small", action="store_true", help="real/toy: the main comparison (Table 4) only")
    parser.add_argument("--only", nargs="+", default=None,
                        help="real/toy: run only rows whose 'table | label' contains one of these strings")
    parser.add_argument("--prompts", type=int, default=4, help="exact: prompts; real: prompts per task")
    parser.add_argument("--tokens", type=int, default=24)
    parser.add_argument("--draft-noise", type=float, default=0.3, help="exact/toy: perturbation of the toy draft")
    parser.add_argument("--toy-sharpness", type=float, default=6.0, help="toy: scale of the target's LM head")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--draft-layers", type=int, default=28)
    parser.add_argument("--draft-model", default=None,
                        help="real: a separate draft model (e.g. qwen2.5-coder-0.5b for --model qwen2.5-coder-1.5b) "
                             "instead of the target's first --draft-layers layers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pj-per-flop", type=float, default=1.0, help="assumed energy per FLOP (pJ)")
    parser.add_argument("--pj-per-byte", type=float, default=60.0, help="assumed energy per DRAM byte (pJ)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = run_exact(args) if args.mode == "exact" else run_real(args)
    result["finished"] = True
    write_json(args, result)


def write_json(args, result: dict) -> None:
    """Write `result` (with the arguments) to --json, if given; also called after every row of a long run, so a
    stopped run keeps its finished rows."""
    if args.json:
        with atomic_path(args.json) as path:      # no half-written file on a crash
            path.write_text(json.dumps({**result, "args": vars(args)}, indent=1))


if __name__ == "__main__":
    main()
