"""Superposed Decoding (Shen et al. 2024; spec: specs/spd.md): k drafts from one forward pass per token.

LOSSY: a new decoder, not the model's greedy or sampling law. The model runs on ONE sequence whose input
at each step is the superposition sum_i gamma_i E[y_i] of the k drafts' newest tokens (gamma = normalised
draft probabilities). All drafts share the resulting next-token distribution; each re-weights its top-K
tokens with its own n-gram mixture (geometric interpolation, alpha), and the best k of the k x K
extensions survive, as in beam search. The KV cache is never forked or reordered, so G new tokens cost
exactly G forwards (the prefill included) for any k. Meant for short drafts (~10 tokens); `reset_every`
commits one draft every s steps for longer ones.

    gen = multidraft.generate(lm, "def fib(n):", method="superposed", max_new_tokens=10, num_drafts=3)
    [d.text for d in gen.drafts]          # ranked, best first; gen.text is drafts[0]
"""

from __future__ import annotations

import inspect
import math
import os
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
import torch

from multidraft import validation
from multidraft.errors import InvalidOptionError
from multidraft.ngram.resolve import resolve_ngram
from multidraft.superposed.ngram_mixture import PAPER_WEIGHTS, DraftNGram, interpolate
from multidraft.types import Generation

FIRST_STEPS = ("interpolated", "lm_only")
RESET_CHOICES = ("sample", "argmax")


@dataclass
class SuperposedConfig:
    num_drafts: int = 3                  # k
    n_token_sample: Optional[int] = None  # K LM tokens kept per step; None = 3k (the paper's code)
    tau: float = 0.06                    # temperature on the LM logits (also sharpens gamma)
    alpha: float = 0.54                  # n-gram weight; 0 = LM only (no n-gram file needed)
    ngram_weights: Sequence[float] = PAPER_WEIGHTS  # lambda for orders 2, 3, ...
    log_penalty: float = 200.0           # subtracted when a draft has no n-gram support at all
    first_step: str = "interpolated"     # or "lm_only" (paper Eq. 1); equal when alpha = 0
    reset_every: Optional[int] = None    # commit one draft every s steps (None = never)
    reset_choice: str = "sample"         # draft committed at a reset: ~ gamma, or the best one

    def validate(self) -> "SuperposedConfig":
        k = self.num_drafts
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidOptionError(f"num_drafts (k) must be an integer >= 1, got {k!r}")
        K = self.n_token_sample
        if K is not None and (isinstance(K, bool) or not isinstance(K, int) or K < k):
            raise InvalidOptionError(f"n_token_sample (K) must be an integer >= num_drafts={k}, got {K!r}")
        if not _is_number(self.tau) or not self.tau > 0 or math.isinf(self.tau):
            raise InvalidOptionError(f"tau must be a finite number > 0, got {self.tau!r}")
        if not _is_number(self.alpha) or not 0.0 <= self.alpha <= 1.0:
            raise InvalidOptionError(f"alpha must be in [0, 1] (0 = LM only, 1 = n-gram only), got {self.alpha!r}")
        if not _is_number(self.log_penalty) or not 0.0 <= self.log_penalty < math.inf:
            raise InvalidOptionError(f"log_penalty must be a finite number >= 0, got {self.log_penalty!r}")
        if self.first_step not in FIRST_STEPS:
            raise InvalidOptionError(f"first_step must be one of {FIRST_STEPS}, got {self.first_step!r}")
        s = self.reset_every
        if s is not None and (isinstance(s, bool) or not isinstance(s, int) or s < 1):
            raise InvalidOptionError(f"reset_every must be None or an integer >= 1, got {s!r}")
        if self.reset_choice not in RESET_CHOICES:
            raise InvalidOptionError(f"reset_choice must be one of {RESET_CHOICES}, got {self.reset_choice!r}")
        return self


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


@dataclass
class SuperposedDraft:
    token_ids: list[int]        # generated tokens only (a finished draft ends with its EOS)
    score: float                # S: summed step scores of the current segment (not an LM log-prob)
    norm_score: float           # S / tokens in the segment: the ranking key (higher is better)
    finished: bool

    @property
    def ppl(self) -> float:     # the paper code's "alive_ppl"/"fin_ppl", in SPD's own score units
        return math.exp(-self.norm_score)


@dataclass
class SuperposedResult:
    drafts: list[SuperposedDraft]    # ranked, best first; at most k
    finished: list[SuperposedDraft] = field(default_factory=list)  # the finished (EOS) pool, <= k
    forward_calls: int = 0
    prefill_seconds: float = 0.0
    forward_seconds: float = 0.0
    ngram_seconds: float = 0.0
    trace: list[dict] = field(default_factory=list)


def check_inputs_embeds(lm) -> None:
    """Superposition needs a model whose forward takes `inputs_embeds` and exposes its embedding matrix."""
    try:
        embeddings = lm.model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        embeddings = None
    params = inspect.signature(lm.model.forward).parameters
    takes = "inputs_embeds" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())
    if embeddings is None or not takes:
        raise InvalidOptionError(
            f"{lm.name} does not accept inputs_embeds (or has no input embedding matrix), which superposed "
            "decoding feeds at every step; use another method (e.g. 'beam' or 'sample') for this model")


def superpose(lm, tokens: torch.Tensor, gamma: torch.Tensor) -> torch.Tensor:
    """sum_i gamma_i E[tokens_i] (d,), through the model's own embedding module (so embedding scales
    apply), gathering only the k rows: never a dense (V, d) product."""
    embeds = lm.embed(tokens.to(lm.device)).float()  # (k, d)
    return gamma.to(embeds.device, torch.float32) @ embeds


@torch.inference_mode()
def superposed_decode(lm, prompt_ids: Sequence[int], max_new_tokens: int, config: SuperposedConfig,
                      ngram=None, seed: Optional[int] = None, trace: bool = False) -> SuperposedResult:
    """Run SPD on one prompt; `ngram` is an NGramModel (required when alpha > 0)."""
    config.validate()
    check_inputs_embeds(lm)
    k, G, alpha = config.num_drafts, int(max_new_tokens), float(config.alpha)
    K = min(config.n_token_sample or 3 * k, lm.vocab_size)
    if alpha > 0 and ngram is None:
        raise InvalidOptionError("alpha > 0 needs an n-gram model (ngram=...); use alpha=0 for LM-only drafts")
    scorer = DraftNGram(ngram, config.ngram_weights) if alpha > 0 else None
    eos = torch.tensor(sorted(lm.eos_token_ids) or [-1])
    generator = torch.Generator().manual_seed(seed if seed is not None else 0)
    result = SuperposedResult(drafts=[])

    cache = lm.new_cache()
    out = lm.forward(cache, list(prompt_ids), logits_rows=slice(-1, None))
    result.forward_calls, result.prefill_seconds = 1, out.seconds
    z = out.logits[-1]
    committed: list[int] = []                       # tokens fixed by resets
    segment_start = cache.length                    # cache length where the current segment began
    seqs = torch.zeros(1, 0, dtype=torch.long)      # alive drafts' tokens in this segment [rows, j]
    S = torch.zeros(1, dtype=torch.float64)         # alive scores (-inf = invalid placeholder)
    states = scorer.start(prompt_ids) if scorer else None
    finished: list[tuple[list[int], float]] = []    # (segment tokens incl. EOS, S)
    first = True

    for step in range(1, G + 1):
        rows = 1 if first else seqs.shape[0]
        cand, lp_hat, s = _step_scores(z, config, K, scorer, states, rows, first)
        total = S[:rows, None] + s                               # [rows, K]
        # Best 2k extensions; a stable sort breaks ties by draft index, then LM rank.
        order = torch.sort(total.flatten(), descending=True, stable=True).indices[: 2 * k]
        order = order[torch.isfinite(total.flatten()[order])]
        parents, tokens, scores = order // K, cand[order % K], total.flatten()[order]
        is_eos = torch.isin(tokens, eos)
        finished = _best_finished(finished, seqs, parents, tokens, scores, is_eos, k)
        keep = torch.nonzero(~is_eos).flatten()[:k]
        parents, tokens, scores = parents[keep], tokens[keep], scores[keep]
        if parents.numel() == 0:  # every surviving extension ended: nothing left to extend
            seqs, S = seqs[:0], S[:0]
            _record(trace, result, step, cand, lp_hat, s, parents, tokens, scores, None)
            break
        seqs = torch.cat([seqs[parents], tokens[:, None]], dim=1)
        S = scores.clone()
        if scorer:
            states = scorer.extend(states, parents.tolist(), tokens.tolist())
        if len(keep) < k:
            seqs, S, states = _pad_drafts(seqs, S, states, k - len(keep))
        first = False
        if step == G:
            _record(trace, result, step, cand, lp_hat, s, parents, tokens, scores, None)
            break
        gamma = torch.softmax(S, dim=0)
        if config.reset_every and step % config.reset_every == 0:
            # Commit one draft, drop the superposed history, refill the cache with its real tokens: this
            # forward replaces the superposed one, so the count stays one per generated token.
            pick = (int(torch.multinomial(gamma.float(), 1, generator=generator)) if config.reset_choice == "sample"
                    else 0)
            chosen = seqs[pick].tolist()
            _record(trace, result, step, cand, lp_hat, s, parents, tokens, scores, gamma, reset_to=pick)
            committed += chosen
            cache.crop(segment_start)
            out = lm.forward(cache, chosen, logits_rows=slice(-1, None))
            segment_start = cache.length
            if scorer:
                states = states[[pick]]
            seqs, S = torch.zeros(1, 0, dtype=torch.long), torch.zeros(1, dtype=torch.float64)
            finished, first = [], True
        else:
            embedding = superpose(lm, seqs[:, -1], gamma)
            _record(trace, result, step, cand, lp_hat, s, parents, tokens, scores, gamma, embedding=embedding)
            out = lm.forward(cache, inputs_embeds=embedding[None])
        result.forward_calls += 1
        result.forward_seconds += out.seconds
        z = out.logits[-1]

    result.drafts, result.finished = _rank(committed, seqs, S, finished, k)
    result.ngram_seconds = scorer.seconds if scorer else 0.0
    return result


def _step_scores(z, config: SuperposedConfig, K: int, scorer, states, rows: int, first: bool):
    """The step's K shared candidates (by LM probability), their renormalised LM log-probabilities and each alive
    draft's interpolated score s [rows, K]."""
    logp = torch.log_softmax(z.double() / config.tau, dim=-1)
    top_lp, cand = torch.topk(logp, K)
    # The k x K bookkeeping is tiny and partly numpy (n-grams): it runs on the host, one copy per step, whatever the
    # model's device (it used to mix a CUDA step score with host scores and crash).
    top_lp, cand = top_lp.cpu(), cand.cpu()
    lp_hat = top_lp - torch.logsumexp(top_lp, dim=0)
    q = scorer.mixture(states[:rows], cand) if scorer else None
    s = interpolate(lp_hat, q, float(config.alpha), config.log_penalty).expand(rows, K)
    if first and config.first_step == "lm_only":
        s = lp_hat[None, :].clone()
    return cand, lp_hat, s


def _best_finished(finished, seqs, parents, tokens, scores, is_eos, k: int):
    """The k best finished drafts: the earlier ones and this step's extensions that ended with EOS."""
    for idx in torch.nonzero(is_eos).flatten().tolist():
        finished.append((seqs[parents[idx]].tolist() + [int(tokens[idx])], float(scores[idx])))
    return sorted(finished, key=lambda f: -f[1])[:k]


def _pad_drafts(seqs, S, states, pad: int):
    """Fewer than k finite extensions: `pad` invalid placeholders (score -inf: gamma 0, never returned)."""
    seqs = torch.cat([seqs, seqs[:1].expand(pad, -1)])
    S = torch.cat([S, torch.full((pad,), -math.inf, dtype=torch.float64)])
    if states is not None:
        states = np.concatenate([states, states[[0] * pad]])
    return seqs, S, states


def _rank(committed, seqs, S, finished, k):
    """Alive (full length) and finished drafts merged by normalised score, best first (spd.md §6 #12);
    also returns the finished pool."""
    pool = []
    for row in range(seqs.shape[0]):
        if math.isfinite(float(S[row])):
            tokens = seqs[row].tolist()
            pool.append(SuperposedDraft(committed + tokens, float(S[row]), float(S[row]) / max(len(tokens), 1), False))
    done = [SuperposedDraft(committed + tokens, score, score / len(tokens), True) for tokens, score in finished]
    pool.extend(done)
    pool.sort(key=lambda d: -d.norm_score)  # stable: alive before finished on ties
    return pool[:k], done


def _record(trace, result, step, cand, lp_hat, s, parents, tokens, scores, gamma, embedding=None, reset_to=None):
    if trace:
        result.trace.append({"step": step, "candidates": cand.clone(), "lp_hat": lp_hat.clone(),
                             "step_scores": s.clone(), "parents": parents.clone(), "tokens": tokens.clone(),
                             "scores": scores.clone(), "gamma": None if gamma is None else gamma.clone(),
                             "embedding": embedding, "reset_to": reset_to})


# ---------------------------------------------------------------------------------------------- method

OPTIONS = {"num_drafts": 3, "n_token_sample": None, "tau": 0.06, "alpha": 0.54, "ngram": None,
           "ngram_weights": PAPER_WEIGHTS, "log_penalty": 200.0, "first_step": "interpolated",
           "reset_every": None, "reset_choice": "sample"}


def config_from_options(options: dict) -> SuperposedConfig:
    fields = {name: options[name] for name in OPTIONS if name != "ngram" and name in options}
    return SuperposedConfig(**fields).validate()


def check_options(options: dict) -> None:
    """Every check that needs no model: the config's fields, the n-gram weights and the n-gram argument's type."""
    config_from_options(options)
    weights = options["ngram_weights"]
    if not isinstance(weights, (list, tuple)) or not weights:
        raise InvalidOptionError(f"ngram_weights must be a list of non-negative numbers (orders 2, 3, ...), "
                                 f"got {weights!r:.80}")
    for weight in weights:
        validation.number("each ngram_weights entry", weight, minimum=0.0)
    ngram = options.get("ngram")
    if ngram is not None and not isinstance(ngram, (str, os.PathLike)) and not hasattr(ngram, "candidate_probs"):
        raise InvalidOptionError(f"ngram must be a path or an NGramModel, got {type(ngram).__name__}")


def run_superposed(lm, prompt_ids, sampler, output, stats, options):
    config = config_from_options(options)
    if not sampler.params.greedy:
        raise InvalidOptionError("superposed decoding is deterministic and has its own temperature `tau`; "
                                 "leave temperature unset (0) and pass tau=... instead")
    check_inputs_embeds(lm)
    # The row's load_artifacts resolved `ngram` (into the caller's Artifacts) when alpha > 0.
    ngram = resolve_ngram(lm, options.get("ngram")) if config.alpha > 0 else None
    started = time.perf_counter()
    result = superposed_decode(lm, prompt_ids, output.max_new_tokens, config, ngram, seed=sampler.params.seed)
    stats.target_calls += result.forward_calls
    stats.prefill_time, stats.verify_time, stats.draft_time = (result.prefill_seconds, result.forward_seconds,
                                                               result.ngram_seconds)
    stats.record_plain_steps(result.forward_calls)      # each forward (the prefill too) emits one token of every draft
    output.add(result.drafts[0].token_ids if result.drafts else [])
    output.finalize(stats, started)
    return [Generation(lm.decode(d.token_ids), list(d.token_ids), stats, score=d.norm_score) for d in result.drafts]
