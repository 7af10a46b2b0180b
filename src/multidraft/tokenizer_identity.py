"""Which vocabulary a tokenizer (or a model) has: the one definition behind every vocabulary check.

n-gram files and heads files record it and refuse another tokenizer, draft and target models must share it, and the
default n-gram file is named after it. A leaf module (hashlib and weakref only), so any package may import it.
"""

from __future__ import annotations

import hashlib
import weakref

# model -> its fingerprint, without writing onto the model object (entries go with their models)
_MODEL_FINGERPRINTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def vocab_fingerprint(tokenizer) -> str:
    """A digest of the token -> id map: equal for tokenizers that encode identically (Qwen2.5 0.5B and 1.5B)."""
    items = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    digest = hashlib.sha256("\n".join(f"{token}\t{index}" for token, index in items).encode("utf-8", "surrogatepass"))
    return f"vocab-{digest.hexdigest()[:16]}"


def model_vocab_fingerprint(lm) -> str:
    """`vocab_fingerprint` of a loaded model's tokenizer, computed once per model (a 150k vocabulary takes ~0.1 s)."""
    try:
        fingerprint = _MODEL_FINGERPRINTS.get(lm)
    except TypeError:              # an object that cannot be weakly referenced or hashed: computed each time
        return vocab_fingerprint(lm.tokenizer)
    if fingerprint is None:
        fingerprint = vocab_fingerprint(lm.tokenizer)
        _MODEL_FINGERPRINTS[lm] = fingerprint
    return fingerprint


def remember_fingerprint(stand_in, fingerprint: str) -> None:
    """Give an object without a tokenizer (a replay's stand-in for a model) the vocabulary fingerprint its recorded
    steps carry, so a suffix store binds to it as to that model."""
    _MODEL_FINGERPRINTS[stand_in] = fingerprint


def vocab_family(lm) -> str:
    """The vocabulary family of a loaded model: the registry's name for it, else its tokenizer's fingerprint."""
    family = getattr(getattr(lm, "info", None), "vocab_family", None)
    return str(family) if family else model_vocab_fingerprint(lm)


def same_vocabulary(first, second) -> bool:
    """Whether two loaded models' token ids mean the same tokens (same family, or the same token -> id map)."""
    return (first is second or vocab_family(first) == vocab_family(second)
            or model_vocab_fingerprint(first) == model_vocab_fingerprint(second))
