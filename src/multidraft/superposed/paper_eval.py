"""Pieces of the Superposed Decoding paper's evaluation that the plain benchmark (evaluation.py) lacks
(issue #21; run by benchmarks/papers/superposed_paper.py):

- `split_prefixes`: a validation split (hyperparameter tuning) disjoint from the test split;
- `truncate_to_common_length`: compare drafts over the same number of tokens when some stop at EOS;
- `ngram_greedy`: the paper's "N-Gram" baseline (greedy on the n-gram mixture alone, spd.md §6 #17);
- `linearity_probe` / `cosine`: Eq. 8 (Figs. 3 and 15), per step and per layer;
- `repetition_curve`: unique n-gram ratios and Self-BLEU of the first L tokens, for several L (Fig. 8).
"""

from __future__ import annotations

import copy
import math
from typing import Sequence

import numpy as np
import torch

from multidraft.eval.metrics import self_bleu, unique_ngram_ratios


# ------------------------------------------------------------------ splits

def split_prefixes(prefixes: Sequence[Sequence[int]], num_validation: int) -> tuple[list[list[int]], list[list[int]]]:
    """(validation, test): the first `num_validation` distinct prefixes, then the rest. Duplicated prefixes
    are dropped (kept once, on the validation side if seen there first), so no prefix is in both splits."""
    if num_validation < 0:
        raise ValueError("num_validation must be >= 0")
    seen: set[tuple[int, ...]] = set()
    distinct = []
    for prefix in prefixes:
        key = tuple(int(t) for t in prefix)
        if key not in seen:
            seen.add(key)
            distinct.append(list(key))
    if num_validation > len(distinct):
        raise ValueError(f"only {len(distinct)} distinct prefixes for a validation split of {num_validation}")
    return distinct[:num_validation], distinct[num_validation:]


# ------------------------------------------------------------------ equal lengths

def truncate_to_common_length(drafts: Sequence[Sequence[int]]) -> tuple[int, list[list[int]]]:
    """(m, drafts cut to their first m tokens) with m the shortest non-empty draft's length, so every
    perplexity in a comparison covers the same number of positions. Empty drafts stay empty (nan later)."""
    lengths = [len(d) for d in drafts if len(d) > 0]
    if not lengths:
        return 0, [list(d) for d in drafts]
    m = min(lengths)
    return m, [list(d)[:m] for d in drafts]


# ------------------------------------------------------------------ n-gram-only baseline

def ngram_greedy(ngram, prompt_ids: Sequence[int], max_new_tokens: int, weights: Sequence[float],
                 eos_ids=(), fallback_unigram: bool = True) -> list[int]:
    """Greedy decoding on q(x) = sum_n lambda_n p_n(x | context) over the whole vocabulary (no LM).
    When no order has seen the context (q empty) the most frequent corpus token is taken (if
    `fallback_unigram`), else generation stops. Ties go to the lower token id."""
    seq = [int(t) for t in prompt_ids]
    out: list[int] = []
    unigram = None
    for _ in range(max_new_tokens):
        ids, q = ngram.interpolated(seq, list(weights))
        if len(ids) == 0:
            if not fallback_unigram:
                break
            if unigram is None:
                uni_ids, uni_p = ngram.next_token_distribution([], 1)
                unigram = int(uni_ids[int(np.argmax(uni_p))])
            token = unigram
        else:
            token = int(ids[int(np.argmax(q))])  # ids are sorted: argmax's first maximum is the lowest id
        out.append(token)
        seq.append(token)
        if token in eos_ids:
            break
    return out


# ------------------------------------------------------------------ linearity (Eq. 8)

def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two vectors (float64); 1.0 when both are zero, 0.0 when exactly one is."""
    a, b = a.double().flatten(), b.double().flatten()
    na, nb = float(a.norm()), float(b.norm())
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(a @ b) / (na * nb)


@torch.inference_mode()
def linearity_probe(lm, prompt_ids: Sequence[int], step_tokens: Sequence[Sequence[int]],
                    step_weights: Sequence[Sequence[float]]) -> np.ndarray:
    """cos(f(sum_i g_i E[y_i]), sum_i g_i f(E[y_i])) for each step and layer (spd.md §5.6, Eq. 8).

    step_tokens[t] = the drafts' newest tokens y_i at step t, step_weights[t] = their weights g (sum 1).
    The history is the prompt, then the superposed embedding of every earlier step (as SPD's cache holds
    it). f = the hidden states after the embedding (layer 0), after each block (1..L; HF applies the final
    norm to the last one) and the logits (L+1). Returns cos [steps, L+2]."""
    model = lm.model
    embed = model.get_input_embeddings()
    device = lm.device
    out = model(input_ids=torch.as_tensor([list(prompt_ids)], device=device), use_cache=True)
    cache = out.past_key_values
    rows = []
    for tokens, weights in zip(step_tokens, step_weights):
        ids = torch.as_tensor(list(tokens), device=device)
        g = torch.as_tensor(list(weights), dtype=torch.float32, device=device)
        single = embed(ids).float()                              # (k, d)
        mixed = (g @ single)[None]                               # (1, d)
        per_draft = []
        for i in range(len(tokens)):                             # f(E[y_i]) on a copy of the same history
            res = model(inputs_embeds=single[i][None, None].to(lm.dtype), past_key_values=copy.deepcopy(cache),
                        use_cache=True, output_hidden_states=True)
            per_draft.append(_layers(res))
        res = model(inputs_embeds=mixed[None].to(lm.dtype), past_key_values=cache, use_cache=True,
                    output_hidden_states=True)                   # advances the history by the superposition
        cache = res.past_key_values
        f_mixed = _layers(res)
        rows.append([cosine(f_mixed[layer], sum(float(g[i]) * per_draft[i][layer] for i in range(len(tokens))))
                     for layer in range(len(f_mixed))])
    return np.asarray(rows)


def _layers(output) -> list[torch.Tensor]:
    return [h[0, -1].double() for h in output.hidden_states] + [output.logits[0, -1].double()]


# ------------------------------------------------------------------ repetition vs length (Fig. 8)

def repetition_curve(drafts: Sequence[Sequence[int]], lengths: Sequence[int]) -> list[dict]:
    """For each L: mean unique 1/2/3-gram ratio of the drafts' first L tokens and their Self-BLEU (k >= 2).
    Drafts shorter than L are used as they are (their own length)."""
    rows = []
    for L in lengths:
        cut = [list(d)[:L] for d in drafts if len(d) > 0]
        ratios = [unique_ngram_ratios(d) for d in cut]
        row = {"length": L, "unique_ngram_ratio": [_nanmean([r[n] for r in ratios]) for n in range(3)]}
        row["self_bleu"] = self_bleu(cut) if len(cut) >= 2 else float("nan")
        rows.append(row)
    return rows


def _nanmean(values) -> float:
    finite = [v for v in values if v == v]
    return sum(finite) / len(finite) if finite else math.nan
