"""MTAD joint-likelihood verification (specs/mtad.md §5). LOSSY: the output is biased toward high joint
likelihood and does not follow the target's sampling law.

The draft is one beam-searched chain d_1..d_γ with its per-token draft log-probs lq_i (warped). With the target's
warped log-probs lp_i, S_i = sum_{m<=i} (lp_m - lq_m) is the log joint ratio of the prefix d_1..d_i. The verifier
keeps the LONGEST prefix with S_i >= log(threshold) (not the prefix before the first failure), then emits one
token drawn from the plain warped target at the first unaccepted position (no residual).

Temperature 0 is MTAD-greedy, the paper's approximation of greedy MTJD (Corollary 3.3): the beam is a plain beam
search over the draft's *unwarped* (temperature 1, the run's top-k / top-p) distribution, both joints are
compared under that same law, and the extra token is the target's argmax. The one-hot greedy warp would make
every ratio 0 or 1 (the draft would be accepted only where it matches the target's argmax path) and num_beams
would change nothing: that is plain greedy speculative decoding, not MTJD. Threshold 1 still gives exactly
greedy decoding.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from multidraft.errors import InvalidOptionError
from multidraft.sampling import SamplingParams, logits_to_probs
from multidraft.types import Verdict
from multidraft.verify.base import Verifier

THRESHOLD_SEMANTICS = ("paper", "strict")


def joint_law_params(params: SamplingParams) -> SamplingParams:
    """The law under which MTAD's draft beam and its joint ratios are computed: the run's warp when sampling; at
    temperature 0 the unwarped law (temperature 1, same top-k / top-p), so that beam search seeks the joint mode."""
    if params.greedy:
        return SamplingParams(1.0, params.top_k, params.top_p)
    return SamplingParams(params.temperature, params.top_k, params.top_p)


def check_threshold(threshold, semantics: str = "paper") -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 <= threshold <= 1.0:
        raise InvalidOptionError(f"accept_threshold must be a number in [0, 1] (1 rejects every draft, 0 accepts "
                                 f"every draft), got {threshold!r}")
    if semantics not in THRESHOLD_SEMANTICS:
        raise InvalidOptionError(f"threshold_semantics must be one of {', '.join(THRESHOLD_SEMANTICS)}, "
                                 f"got {semantics!r}")
    return float(threshold)


def accept_length(target_logprobs: Sequence[float], draft_logprobs: Sequence[float], threshold: float,
                  semantics: str = "paper") -> int:
    """Length of the longest draft prefix whose target/draft joint ratio passes `threshold` (spec §5.2).

    "paper": threshold >= 1 accepts nothing, ratio >= threshold passes. "strict" (the ICLR code): ratio > threshold,
    no sentinel at 1. threshold <= 0 accepts the whole draft in both.
    """
    gamma = len(draft_logprobs)
    if threshold <= 0:
        return gamma
    if threshold >= 1 and semantics == "paper":
        return 0
    log_threshold = math.log(threshold)
    log_ratio, accepted = 0.0, 0
    for index, (lp, lq) in enumerate(zip(target_logprobs, draft_logprobs)):
        log_ratio += lp - lq          # lp = -inf (outside the target's support) makes every longer prefix fail
        passes = log_ratio > log_threshold if semantics == "strict" else log_ratio >= log_threshold
        if passes:
            accepted = index + 1
    return accepted


class MTADVerifier(Verifier):
    """Accepts the longest prefix passing the joint-likelihood threshold, then samples one target token."""

    name = "mtad"
    lossless = False
    needs = ("draft_logprobs",)

    def __init__(self, accept_threshold: float = 0.1, threshold_semantics: str = "paper"):
        self.accept_threshold = check_threshold(accept_threshold, threshold_semantics)
        self.threshold_semantics = threshold_semantics

    def verify(self, draft, target_logits, sampler, first_position):
        gamma = len(draft)
        accepted = 0
        if gamma:
            draft_logprobs = list(draft.draft_logprobs)[:gamma]
            target_probs = logits_to_probs(target_logits[:gamma], joint_law_params(sampler.params))  # as the draft
            tokens = torch.as_tensor(draft.token_ids, device=target_probs.device)
            picked = target_probs.gather(1, tokens[:, None])[:, 0].double()
            target_logprobs = torch.log(picked).tolist()                  # log 0 = -inf
            accepted = accept_length(target_logprobs, draft_logprobs, self.accept_threshold,
                                     self.threshold_semantics)
        # The extra token comes from the plain warped target (its argmax at temperature 0): with threshold 1 this is
        # plain sampling (greedy decoding), draw for draw.
        next_token = sampler.pick(target_logits[accepted], first_position + accepted)
        return Verdict(list(range(accepted)), next_token, {"accepted": accepted})
