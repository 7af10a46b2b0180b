"""BiLD (Big Little Decoder) as a drafter x verifier pair in the one draft-and-verify loop. LOSSY.

The draft model samples tokens one at a time from its warped law and hands over to the target (ends the draft)
as soon as its own confidence, the largest probability of its next-token law, falls below `fallback_threshold`,
or after `max_draft_tokens` tokens (the "fallback" policy); the target then rolls back at the first token it
finds unlikely (verify/bild.py). Defaults are the MTAD paper's BiLD settings (step length 10, fallback 0.9,
rollback 2; its Table 13).
"""

from __future__ import annotations

from multidraft.drafters.draft_model_options import positive_int
from multidraft.drafters.draft_session import DraftLMDrafter
from multidraft.errors import InvalidOptionError
from multidraft.sampling import SamplingParams, argmax_rows, draw, logits_to_probs
from multidraft.types import Draft
from multidraft.verify.bild import check_rollback

BILD_STREAM = 24


class BiLDDrafter(DraftLMDrafter):
    name = "bild_draft"
    provides = ("draft_nodes",)

    def __init__(self, draft_lm, max_draft_tokens: int, fallback_threshold: float, params: SamplingParams):
        super().__init__(draft_lm)
        self.max_draft_tokens = max_draft_tokens
        self.fallback_threshold = fallback_threshold
        self.params = SamplingParams(params.temperature, params.top_k, params.top_p)

    def drafting(self, state, max_tokens):
        length = min(self.max_draft_tokens, max_tokens)
        if length < 1:
            return Draft()
        first_position = len(state.seq)
        logits = yield from self.session.start(state.seq)
        tokens, nodes = [], []
        for depth in range(length):
            row = logits[-1]
            # confidence = the draft's own top probability (its softmax at temperature 0, where the law is one-hot)
            confidence_law = logits_to_probs(row, SamplingParams(1.0) if self.params.greedy else self.params)
            if float(confidence_law.max()) < self.fallback_threshold:
                break
            if self.params.greedy:             # the one-hot law's argmax is the row's own
                token = argmax_rows(row)[0]
            else:
                token = draw(logits_to_probs(row, self.params), state.sampler.generator(first_position + depth,
                                                                                        BILD_STREAM))
            tokens.append(token)
            if depth + 1 < length:
                logits, created = yield from self.session.extend([token], [nodes[-1] if nodes else -1])
                nodes.append(created[0])
        return Draft.chain(tokens, draft_nodes=nodes)

    def observe(self, state, draft, verdict, forward_output, kept_rows) -> None:
        self.session.keep_path((draft.draft_nodes or [])[: len(verdict.accepted_nodes)])


def check_options(options: dict) -> None:
    """The checks that need no model, run before the draft model is loaded."""
    positive_int("max_draft_tokens", options["max_draft_tokens"])
    fallback = options["fallback_threshold"]
    if isinstance(fallback, bool) or not isinstance(fallback, (int, float)) or not 0 <= fallback <= 1:
        raise InvalidOptionError(f"fallback_threshold must be a probability in [0, 1] (the draft hands over when "
                                 f"its top probability falls below it; 0 never hands over), got {fallback!r}")
    check_rollback(options["rollback_threshold"])


def make_drafter(lm, sampler, options):
    """options["draft_model"] is a ready `LM` (methods.py resolves it first); the options are checked."""
    return BiLDDrafter(options["draft_model"], options["max_draft_tokens"], float(options["fallback_threshold"]),
                       sampler.params)


__all__ = ["BiLDDrafter"]
