"""BiLD's rollback verification (Kim et al. 2023, "Big Little Decoder"; specs/mtad.md §8.2). LOSSY.

The draft is one chain d_1..d_n. The target rejects at the first draft token whose negative log-likelihood under
the target, -log p~(d_i), exceeds `rollback_threshold`, keeps the tokens before it, and emits one token drawn from
the plain warped target at that position (after the whole chain when nothing is rejected). Nothing corrects the
law of the kept tokens, so the output is not the target's sampling law.

At temperature 0 the NLL is taken under the target's unwarped (temperature 1) law: under the one-hot greedy law
every token but the argmax has infinite NLL, which would make BiLD plain greedy speculative decoding.
"""

from __future__ import annotations

import math

import torch

from multidraft.errors import InvalidOptionError
from multidraft.sampling import SamplingParams, logits_to_probs
from multidraft.types import Verdict
from multidraft.verify.base import Verifier


def check_rollback(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise InvalidOptionError(f"rollback_threshold must be a number >= 0 (a target NLL in nats; 0 rejects "
                                 f"every draft token the target does not give probability 1), got {value!r}")
    return float(value)


def rollback_length(target_nll, threshold: float) -> int:
    """Number of leading draft tokens whose target NLL is <= threshold (the first one above it is rolled back)."""
    for index, nll in enumerate(target_nll):
        if nll > threshold:
            return index
    return len(target_nll)


class BiLDVerifier(Verifier):
    name = "bild"
    lossless = False

    def __init__(self, rollback_threshold: float = 2.0):
        self.rollback_threshold = check_rollback(rollback_threshold)

    def verify(self, draft, target_logits, sampler, first_position):
        gamma = len(draft)
        accepted = 0
        if gamma:
            params = sampler.params
            law = SamplingParams(1.0, params.top_k, params.top_p) if params.greedy else params
            probs = logits_to_probs(target_logits[:gamma], law)
            tokens = torch.as_tensor(draft.token_ids, device=probs.device)
            picked = probs.gather(1, tokens[:, None])[:, 0].double().tolist()
            nll = [-math.log(p) if p > 0 else math.inf for p in picked]
            accepted = rollback_length(nll, self.rollback_threshold)
        next_token = sampler.pick(target_logits[accepted], first_position + accepted)
        return Verdict(list(range(accepted)), next_token, {"accepted": accepted})
