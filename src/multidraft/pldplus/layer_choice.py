"""Which hidden layer PLD+(h) ranks with: the layer sweep's per-layer curve, its bootstrap intervals, the tie rule.

The sweep gives, per calibration prompt and per layer, the (generated tokens, steps) PLD+ would take on that
prompt's greedy output. The acceptance length of a set of prompts is pooled (sum tokens / sum steps), as the
loop counts it. Prompts are the unit of noise, so intervals come from resampling prompts (the same resample
for every layer, which makes layer-to-layer differences paired).

Tie rule (the paper finds layers 9-13 of 32 best and uses 9; issue #21): the "middle band" is the layers l
with 9/32 <= l/L <= 13/32. Let b be the layer with the highest pooled acceptance length (ties: lowest l).
If b is in the band, choose b. Otherwise choose the best band layer whose paired difference to b is within
noise -- the 95% bootstrap interval of AAL(b) - AAL(l) reaches 0 or below -- and b only if no band layer is.
So a layer outside the band wins only when it is measurably better than every middle layer.
"""

from __future__ import annotations

import numpy as np

from multidraft.errors import InvalidOptionError

PAPER_BAND = (9 / 32, 13 / 32)     # the paper's best layers (Fig. 5), as a fraction of the depth
CONFIDENCE = 0.95


def middle_band(num_layers: int) -> list[int]:
    """Layers 1..L whose relative depth falls in the paper's 9-13 of 32 (at least one layer)."""
    low, high = PAPER_BAND
    band = [l for l in range(1, num_layers + 1) if low - 1e-9 <= l / num_layers <= high + 1e-9]
    return band or [max(1, round(num_layers * (low + high) / 2))]


def _pooled(counts: np.ndarray) -> np.ndarray:
    """counts (..., prompts, layers, 2) -> pooled acceptance length per layer (..., layers)."""
    tokens, steps = counts[..., 0].sum(-2), counts[..., 1].sum(-2)
    return tokens / np.maximum(steps, 1)


def bootstrap(counts: np.ndarray, resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """(resamples, layers) pooled acceptance lengths, each over a resample of the prompts (with replacement)."""
    counts = np.asarray(counts, dtype=np.float64)
    if counts.ndim != 3 or counts.shape[2] != 2 or counts.shape[0] == 0:
        raise InvalidOptionError("the layer sweep needs (prompts, layers, 2) counts from at least one prompt")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, counts.shape[0], size=(resamples, counts.shape[0]))
    return _pooled(counts[picks])


def choose_layer(counts: np.ndarray, resamples: int = 2000, seed: int = 0) -> dict:
    """The layer the tie rule picks and the curve behind it.

    counts: (prompts, layers, 2) = (tokens, steps) of prompt i at layer j+1. Returns {"layer", "best",
    "band", "curve": {layer: {"aal", "low", "high", "tied_with_best"}}, "rule"}.
    """
    counts = np.asarray(counts, dtype=np.float64)
    samples = bootstrap(counts, resamples, seed)
    aal = _pooled(counts)
    num_layers = aal.shape[0]
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(samples, [alpha, 1 - alpha], axis=0)
    best = int(np.argmax(aal))                       # first maximum: lowest layer on exact ties
    diff_low = np.quantile(samples[:, best][:, None] - samples, alpha, axis=0)
    tied = diff_low <= 0                             # b is not measurably better than l
    band = middle_band(num_layers)
    if best + 1 in band:
        chosen, rule = best + 1, "best layer is in the middle band"
    else:
        contenders = [l for l in band if tied[l - 1]]
        if contenders:
            chosen = max(contenders, key=lambda l: (aal[l - 1], -l))
            rule = f"layer {best + 1} is best but within noise of middle-band layer {chosen}"
        else:
            chosen, rule = best + 1, f"layer {best + 1} is measurably better than every middle-band layer"
    curve = {l: {"aal": round(float(aal[l - 1]), 4), "low": round(float(low[l - 1]), 4),
                 "high": round(float(high[l - 1]), 4), "tied_with_best": bool(tied[l - 1])}
             for l in range(1, num_layers + 1)}
    return {"layer": chosen, "best": best + 1, "band": band, "curve": curve, "rule": rule,
            "resamples": resamples, "confidence": CONFIDENCE}

