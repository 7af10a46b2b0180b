"""Prompt lookup decoding (PLD): copy what followed an earlier occurrence of the trailing n-gram.

Two matching rules (specs/pldplus.md §3.1):
- "reference" (Saxena / Spec-Bench, the PLD+ paper's baseline): longest n-gram first, earliest occurrence that
  ends before the trailing n-gram and has `num_draft_tokens` whole tokens after it.
- "hf" (transformers' `prompt_lookup_num_tokens`): longest n-gram first, earliest occurrence with a non-empty
  continuation, truncated at the end of the sequence and at the first EOS.
Matching is vectorised with numpy, so a step costs microseconds even on long contexts.
"""

from __future__ import annotations

import numpy as np

from multidraft.drafters.base import Drafter, LoopState
from multidraft import validation
from multidraft.types import Draft

VARIANTS = ("hf", "reference")


def find_occurrences(sequence: np.ndarray, ngram: np.ndarray) -> np.ndarray:
    """Start indices (ascending) where `ngram` occurs in `sequence`."""
    size = len(ngram)
    if size == 0 or size > len(sequence):
        return np.empty(0, dtype=np.int64)
    hits = sequence[: len(sequence) - size + 1] == ngram[0]
    for offset in range(1, size):
        hits &= sequence[offset: len(sequence) - size + 1 + offset] == ngram[offset]
    return np.flatnonzero(hits)


def lookup(sequence, max_ngram: int, num_draft_tokens: int, max_tokens: int, variant: str = "hf",
           eos_token_ids=()) -> list[int]:
    """The draft prompt lookup proposes after `sequence` (a list or array of token ids)."""
    seq = np.asarray(sequence, dtype=np.int64)
    length = len(seq)
    budget = min(num_draft_tokens, max_tokens)
    if budget <= 0:
        return []
    for size in range(min(max_ngram, length - 1), 0, -1):
        starts = find_occurrences(seq, seq[length - size:])
        continuation_starts = starts + size
        if variant == "reference":
            ok = (continuation_starts + num_draft_tokens <= length) & (continuation_starts < length - size)
        else:
            ok = continuation_starts < length
        good = continuation_starts[ok]
        if len(good):
            start = int(good[0])
            draft = seq[start: min(start + budget, length)].tolist()
            if variant == "hf" and eos_token_ids:
                for index, token in enumerate(draft):
                    if token in eos_token_ids:
                        draft = draft[:index]
                        break
            return draft
    return []


class PromptLookupDrafter(Drafter):
    """`method="pld"`: drafts copied from the context (prompt and generated text). Lossless."""

    name = "pld"
    cuttable = True

    def __init__(self, max_ngram: int = 3, num_draft_tokens: int = 10, variant: str = "hf"):
        validation.positive_int("max_ngram", max_ngram)
        validation.positive_int("num_draft_tokens", num_draft_tokens)
        validation.choice("variant", variant, VARIANTS)
        self.max_ngram = max_ngram
        self.num_draft_tokens = num_draft_tokens
        self.variant = variant

    def propose(self, state: LoopState, max_tokens: int) -> Draft:
        tokens = lookup(state.seq, self.max_ngram, self.num_draft_tokens, max_tokens, self.variant,
                        state.lm.eos_token_ids)
        return Draft.chain(tokens)
