"""Exact multi-token joint decoding (MTJD, specs/mtad.md §4.1) for tiny vocabularies: a reference, not a method.

Greedy MTJD emits each block of gamma tokens as the argmax of the model's joint law over all V^gamma blocks
(Definition 3.1, deterministic f). It enumerates every block with one batched forward per depth (V^d prefixes at
depth d), so it is only for toy models: tests compare MTAD-greedy (beam search + joint-ratio acceptance) with it,
and benchmarks/mtad_exact.py measures how close the beam approximation gets (Theorem 3.2, Corollary 3.3).
"""

from __future__ import annotations

import itertools
from typing import Iterable, Optional, Sequence

import torch

from multidraft.errors import InvalidOptionError
from multidraft.sampling import SamplingParams, logits_to_probs

MAX_BLOCKS = 2_000_000      # V^gamma entries of the joint table


@torch.inference_mode()
def block_joint_logprobs(lm, context: Sequence[int], gamma: int,
                         params: SamplingParams = SamplingParams(1.0)) -> torch.Tensor:
    """log p(y_1..y_gamma | context) for every block y, as a float64 tensor of shape (V,) * gamma.

    `params` is the law the joint is taken under (temperature 1 and no warp: the model's own joint)."""
    if params.greedy:
        raise InvalidOptionError("the joint law needs a temperature > 0 (temperature 0 is one-hot)")
    device = next(lm.model.parameters()).device
    joint = torch.zeros((), dtype=torch.float64)
    prefixes: list[tuple[int, ...]] = [()]
    vocab = None
    for depth in range(gamma):
        batch = torch.tensor([list(context) + list(prefix) for prefix in prefixes], device=device)
        logits = lm.model(input_ids=batch).logits[:, -1].float()
        log_probs = torch.log(logits_to_probs(logits, params)).double().cpu()     # (V^depth, V)
        if vocab is None:
            vocab = log_probs.shape[-1]
            if vocab ** gamma > MAX_BLOCKS:
                raise InvalidOptionError(f"exact MTJD enumerates V^gamma = {vocab}^{gamma} blocks (limit "
                                         f"{MAX_BLOCKS}); it is a reference for toy vocabularies only")
        joint = joint.reshape(-1, 1) + log_probs                                    # (V^depth, V)
        joint = joint.reshape(-1)
        if depth + 1 < gamma:
            prefixes = list(itertools.product(range(vocab), repeat=depth + 1))
    return joint.reshape((vocab,) * gamma)


def exact_greedy_mtjd(lm, prompt_ids: Sequence[int], block_sizes: Iterable[int] | int, max_new_tokens: int,
                      params: SamplingParams = SamplingParams(1.0),
                      eos_token_id: Optional[int] = None) -> tuple[list[int], list[float]]:
    """Greedy MTJD: each block is the exact joint argmax. `block_sizes` is one gamma or a schedule (cycled).

    Returns the new tokens (cut after the first EOS and at max_new_tokens) and each block's joint log-prob."""
    schedule = [block_sizes] if isinstance(block_sizes, int) else list(block_sizes)
    if not schedule or any(not isinstance(g, int) or g < 1 for g in schedule):
        raise InvalidOptionError(f"block sizes must be integers >= 1, got {block_sizes!r}")
    out: list[int] = []
    block_logprobs: list[float] = []
    for gamma in itertools.cycle(schedule):
        if len(out) >= max_new_tokens:
            break
        gamma = min(gamma, max_new_tokens - len(out))
        joint = block_joint_logprobs(lm, list(prompt_ids) + out, gamma, params)
        flat = int(torch.argmax(joint.reshape(-1)))
        block = list(torch.unravel_index(torch.tensor(flat), joint.shape))
        block = [int(t) for t in block]
        block_logprobs.append(float(joint.reshape(-1)[flat]))
        out.extend(block)
        if eos_token_id is not None and eos_token_id in block:
            return out[: out.index(eos_token_id) + 1], block_logprobs
    return out[:max_new_tokens], block_logprobs


def sequence_logprob(lm, prompt_ids: Sequence[int], new_ids: Sequence[int],
                     params: SamplingParams = SamplingParams(1.0)) -> float:
    """log p(new_ids | prompt) under `params` (the unwarped model at temperature 1 by default)."""
    if not new_ids:
        return 0.0
    device = next(lm.model.parameters()).device
    ids = list(prompt_ids) + list(new_ids)
    with torch.inference_mode():
        logits = lm.model(input_ids=torch.tensor([ids], device=device)).logits[0].float()
    rows = logits[len(prompt_ids) - 1: len(ids) - 1]
    log_probs = torch.log(logits_to_probs(rows, params)).double()
    return float(log_probs.gather(1, torch.tensor(list(new_ids))[:, None].to(log_probs.device)).sum())
