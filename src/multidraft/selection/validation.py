"""Input checks shared by every public selection function.

Everything is converted to float64 and renormalised once here, so the rest of the package can
assume clean laws: the exact target law is `target_probs / target_probs.sum()`.
"""

from __future__ import annotations

import numpy as np
import torch

from multidraft.errors import InvalidOptionError

# How far a row sum may be from 1. Low-precision softmax outputs carry more rounding, so the
# tolerance follows the input dtype (float64 gets the strict 1e-6 of the spec). A float32 softmax over
# Qwen's 151,936 tokens was seen 1.07e-4 off 1 in a real decode, so float32 gets 1e-3: still far below
# the mistakes this check is for (logits, unnormalised scores, a dropped top-p renormalisation).
_SUM_TOLERANCE = {torch.float64: 1e-6, torch.float32: 1e-3}
_LOW_PRECISION_SUM_TOLERANCE = 1e-2


def as_tensor(values, name: str) -> torch.Tensor:
    """Accept a tensor, numpy array or nested list; refuse anything non-numeric."""
    if isinstance(values, torch.Tensor):
        return values.detach()
    try:
        return torch.as_tensor(np.asarray(values, dtype=np.float64))
    except (TypeError, ValueError) as exc:
        raise InvalidOptionError(
            f"{name} must be a tensor or array of probabilities; got {type(values).__name__}"
        ) from exc


def check_probabilities(tensor: torch.Tensor, name: str) -> torch.Tensor:
    """Return a float64, renormalised copy of `tensor` (rows = laws) or raise InvalidOptionError."""
    if not (tensor.is_floating_point()):
        raise InvalidOptionError(f"{name} must hold floating-point probabilities, got dtype {tensor.dtype}")
    tolerance = _SUM_TOLERANCE.get(tensor.dtype, _LOW_PRECISION_SUM_TOLERANCE)
    values = tensor.to(torch.float64)
    # One sum and one min catch everything (NaN and inf make the sum non-finite); a separate
    # isfinite pass costs more than the whole selection at V = 150k.
    sums = values.sum(dim=-1, keepdim=True)
    # The three numbers come to the host together: one device sync per check, not three (CUDA).
    total, smallest, worst = torch.stack([sums.sum(), values.min(), (sums - 1.0).abs().max()]).tolist()
    if not np.isfinite(total):
        raise InvalidOptionError(f"{name} contains NaN or infinite values; check the logits that produced it")
    if smallest < 0:
        raise InvalidOptionError(f"{name} contains negative probabilities; pass softmax outputs, not logits")
    if worst > tolerance:
        raise InvalidOptionError(
            f"{name} rows must sum to 1 (off by {worst:.3g}, tolerance {tolerance:g}); "
            "normalise them (probs / probs.sum(-1, keepdim=True)) before calling"
        )
    if worst <= 1e-15:
        return values
    # renormalise so every later formula sees exact laws; never modify the caller's tensor
    return values.div_(sums) if values is not tensor else values / sums


def check_inputs(draft_probs, target_probs) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate a (K, V) draft table and a (V,) target law; return float64 copies on the same device."""
    draft = as_tensor(draft_probs, "draft_probs")
    target = as_tensor(target_probs, "target_probs")
    if target.dim() != 1:
        raise InvalidOptionError(
            f"target_probs must be a 1-D tensor of shape (V,), got shape {tuple(target.shape)}"
        )
    if draft.dim() == 1:
        raise InvalidOptionError(
            "draft_probs must be 2-D with one row per draft, shape (K, V); "
            "for a single draft pass draft_probs.unsqueeze(0)"
        )
    if draft.dim() != 2:
        raise InvalidOptionError(f"draft_probs must have shape (K, V), got shape {tuple(draft.shape)}")
    num_drafts, vocab_size = draft.shape
    if num_drafts < 1:
        raise InvalidOptionError("draft_probs has K = 0 rows; pass at least one draft (K >= 1)")
    if vocab_size != target.shape[0]:
        raise InvalidOptionError(
            f"vocabulary mismatch: draft_probs has V = {vocab_size} columns but target_probs has "
            f"{target.shape[0]} entries; draft and target must share one vocabulary"
        )
    if vocab_size < 1:
        raise InvalidOptionError("the vocabulary is empty (V = 0)")
    return check_probabilities(draft, "draft_probs"), check_probabilities(target, "target_probs")


def check_candidates(candidates, num_drafts: int, vocab_size: int) -> list[int]:
    """Return the K candidate ids as Python ints, checking count and range."""
    if isinstance(candidates, torch.Tensor):
        if candidates.is_floating_point():
            raise InvalidOptionError("candidates must be integer token ids, got a floating-point tensor")
        ids = [int(v) for v in candidates.reshape(-1).tolist()]
    else:
        try:
            ids = [int(v) for v in np.asarray(candidates).reshape(-1).tolist()]
        except (TypeError, ValueError) as exc:
            raise InvalidOptionError("candidates must be a sequence of integer token ids") from exc
    if len(ids) != num_drafts:
        raise InvalidOptionError(
            f"got {len(ids)} candidates but draft_probs has {num_drafts} rows; "
            "pass exactly one drafted token per draft row"
        )
    for token in ids:
        if not 0 <= token < vocab_size:
            raise InvalidOptionError(f"candidate token id {token} is outside the vocabulary [0, {vocab_size})")
    return ids


def check_options(scheme: str, options: dict, allowed: dict) -> dict:
    """Merge `options` over the scheme's defaults; unknown names are an error."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        known = ", ".join(sorted(allowed)) or "none"
        raise InvalidOptionError(f"scheme {scheme!r} does not take option(s) {unknown}; it accepts: {known}")
    merged = dict(allowed)
    merged.update(options)
    return merged


def rows_identical(draft: torch.Tensor) -> bool:
    """True when every draft row is exactly the same law (IID drafts)."""
    return all(torch.equal(row, draft[0]) for row in draft[1:])
