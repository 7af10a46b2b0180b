"""Which vocabulary a tokenizer (or a model) has: the one definition behind every vocabulary check.

n-gram files and heads files record it and refuse another tokenizer, draft and target models must share it, and the
default n-gram file is named after it. A leaf module (hashlib only), so any package may import it.
"""

from __future__ import annotations

import hashlib


def vocab_fingerprint(tokenizer) -> str:
    """A digest of the token -> id map: equal for tokenizers that encode identically (Qwen2.5 0.5B and 1.5B)."""
    items = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    digest = hashlib.sha256("\n".join(f"{token}\t{index}" for token, index in items).encode("utf-8", "surrogatepass"))
    return f"vocab-{digest.hexdigest()[:16]}"


def model_vocab_fingerprint(lm) -> str:
    """`vocab_fingerprint` of a loaded model's tokenizer, computed once per model (a 150k vocabulary takes ~0.1 s)."""
    fingerprint = getattr(lm, "_multidraft_vocab_digest", None)
    if fingerprint is None:
        fingerprint = vocab_fingerprint(lm.tokenizer)
        lm._multidraft_vocab_digest = fingerprint
    return fingerprint


def vocab_family(lm) -> str:
    """The vocabulary family of a loaded model: the registry's name for it, else its tokenizer's fingerprint."""
    family = getattr(getattr(lm, "info", None), "vocab_family", None)
    return str(family) if family else model_vocab_fingerprint(lm)


def same_vocabulary(first, second) -> bool:
    """Whether two loaded models' token ids mean the same tokens (same family, or the same token -> id map)."""
    return (first is second or vocab_family(first) == vocab_family(second)
            or model_vocab_fingerprint(first) == model_vocab_fingerprint(second))
