"""Quality metrics for generated drafts: perplexity under a scorer LM, best-of-k, Self-BLEU, n-gram uniqueness.

Definitions follow the Superposed Decoding evaluation (spd.md §5.2):
  * perplexity = exp(-mean log p_scorer(token | prefix, earlier tokens)) over the GENERATED tokens only
    (prefix tokens are context, never scored); a finished draft keeps its EOS;
  * best-of-k = the lowest perplexity among one prefix's k drafts;
  * Self-BLEU: each draft is a hypothesis with the other drafts as references (sentence BLEU over token
    ids, uniform weights up to 4-grams or the shortest draft's length, "method1" smoothing: a zero
    n-gram match count becomes 0.1); averaged over drafts. Lower = more diverse;
  * unique n-gram ratio = |distinct n-grams| / |n-grams| of one generation, n = 1, 2, 3. Lower = more repetition.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import numpy as np
import torch

SMOOTHING_EPSILON = 0.1


@torch.inference_mode()
def token_log_probs(scorer, prefix_ids: Sequence[int], drafts: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """log p_scorer(token | prefix, earlier tokens) of every generated token of each draft, from one batched
    right-padded forward (so perplexities over the first m tokens need no rescoring)."""
    prefix = [int(t) for t in prefix_ids]
    if not prefix:
        raise ValueError("perplexity needs a non-empty prefix (the first generated token is scored given it)")
    rows = [prefix + [int(t) for t in d] for d in drafts]
    if not rows:
        return []
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    device = scorer.device
    logits = scorer.call_model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits.float()
    log_probs = torch.log_softmax(logits[:, :-1], dim=-1)  # position t predicts token t+1
    token_lp = log_probs.gather(-1, ids[:, 1:, None].to(device))[..., 0].cpu()
    return [token_lp[i, len(prefix) - 1: len(prefix) - 1 + len(d)].double().numpy() for i, d in enumerate(drafts)]


def draft_perplexities(scorer, prefix_ids: Sequence[int], drafts: Sequence[Sequence[int]]) -> list[float]:
    """Perplexity of each draft (generated ids) after `prefix_ids` under `scorer` (an LM). One batched forward
    (right-padded); an empty draft gets nan."""
    return [math.exp(-float(lp.mean())) if len(lp) else float("nan")
            for lp in token_log_probs(scorer, prefix_ids, drafts)]


def best_of_k(perplexities: Sequence[float]) -> float:
    finite = [p for p in perplexities if p == p]
    return min(finite) if finite else float("nan")


def _ngrams(tokens: Sequence, n: int) -> Counter:
    return Counter(tuple(tokens[i: i + n]) for i in range(len(tokens) - n + 1))


def sentence_bleu(hypothesis: Sequence, references: Sequence[Sequence], max_order: int = 4) -> float:
    """BLEU of one hypothesis against references (clipped n-gram precision, brevity penalty, method1)."""
    hyp_len = len(hypothesis)
    if hyp_len == 0:
        return 0.0
    log_precision = 0.0
    for n in range(1, max_order + 1):
        hyp = _ngrams(hypothesis, n)
        total = sum(hyp.values())
        if total == 0:
            return 0.0
        best_ref: Counter = Counter()
        for ref in references:
            best_ref |= _ngrams(ref, n)  # max count per n-gram over references (clipping)
        matches = sum(min(count, best_ref[gram]) for gram, count in hyp.items())
        log_precision += math.log((matches or SMOOTHING_EPSILON) / total) / max_order
    ref_len = min((len(r) for r in references), key=lambda length: (abs(length - hyp_len), length))
    brevity = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return brevity * math.exp(log_precision)


def self_bleu(drafts: Sequence[Sequence]) -> float:
    """Mean BLEU of each draft against the others (k >= 2 drafts). Identical drafts give 1."""
    if len(drafts) < 2:
        raise ValueError("Self-BLEU needs at least two drafts")
    shortest = min(len(d) for d in drafts)
    if shortest == 0:
        raise ValueError("Self-BLEU needs non-empty drafts")
    order = min(4, shortest)
    scores = [sentence_bleu(d, [o for j, o in enumerate(drafts) if j != i], order) for i, d in enumerate(drafts)]
    return sum(scores) / len(scores)


def unique_ngram_ratios(tokens: Sequence, orders: Sequence[int] = (1, 2, 3)) -> tuple[float, ...]:
    """|distinct n-grams| / |n-grams| for each n (nan when the sequence is shorter than n)."""
    out = []
    for n in orders:
        grams = _ngrams(tokens, n)
        total = sum(grams.values())
        out.append(len(grams) / total if total else float("nan"))
    return tuple(out)


def mean(values) -> float:
    finite = [v for v in values if v == v]
    return sum(finite) / len(finite) if finite else float("nan")
