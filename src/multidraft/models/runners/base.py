"""The Runner interface: how one LM's forwards run, and what they guarantee (its declared capabilities).

A runner is picked by name (`LM.use_runner`, `load_model(runner=...)`); `activate` sets it up on the LM's model and
returns the runner actually in use (itself, or the fallback it warned about). Callers read `lm.capabilities`,
never the runner's name. The base class runs HF's modules: `forward` (one request over a KVCache or the static
runner's cache) and `packed` (the engine's rows of many requests over a KV arena); the native runner replaces both.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Optional, Union

import torch

from multidraft.errors import InvalidOptionError
from multidraft.models.attention_rows import AttentionQueries
from multidraft.models.kv_cache import (KVCache, StaticKVCache, additive_mask, sliding_window, visible_keys,
                                        windowed)
from multidraft.sampling import check_finite


@dataclass
class ForwardOutput:
    logits: torch.Tensor                           # (T, V) float32, one row per new token
    hidden: Optional[torch.Tensor] = None          # (T, d) of the captured layer
    # eager: (num_heads_captured, T, kv_len) post-softmax weights; other kernels: AttentionQueries (rows on demand)
    attention: Optional[Union[torch.Tensor, AttentionQueries]] = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Capabilities:
    batch_invariant: bool = False    # a row's logits are the same bits alone, in a verify, a tree or a packed batch
    thread_invariant: bool = False   # ... and at any thread count
    prefix_reusable: bool = False    # a cached prefix's keys/values give the bits of a fresh prefill (prefix_cache)
    captures: bool = True            # hidden states of chosen layers and attention rows of chosen heads
    cuda_graphs: bool = False        # forwards replayed as CUDA graphs


class Runner:
    """One way to run an LM's forwards. Subclasses set `name`, `capabilities` and `quantized` (runs a model on
    GGUF blocks, chosen at load) and override what they do differently."""

    name = ""
    quantized = False
    capabilities = Capabilities()

    def __init__(self, lm):
        self.lm = lm

    def activate(self, progress: bool, requested: str) -> "Runner":
        """Set up on the LM's model; the runner in use (self, or a fallback after one warning). requested: the
        name the user asked for ("auto" included), which decides whether a fallback warns."""
        return self

    def deactivate(self) -> None:
        """Undo what `activate` installed on the model (before another runner takes it)."""

    def kernels(self, prefill: bool = False):
        """Context in which the model's HF modules take this runner's kernels."""
        return contextlib.nullcontext()

    def new_cache(self):
        """A cache for one generation's forwards on this runner (LM.new_cache; the static runner's comes first)."""
        return KVCache()

    def device(self) -> torch.device:
        """Where the forwards run (LM.device; its inputs are made there)."""
        return next(self.lm.model.parameters()).device

    @property
    def static(self):
        """The static runner's arena and graphs (static_runner.StaticRunner), None for other runners."""
        return None

    # ----- forwards on HF's modules -----
    def forward(self, cache, model_inputs, position_ids, parents, visible, logits_rows, hidden_layer,
                attention_heads):
        """LM.forward's work on a prepared input (hooks capture hidden states and attention rows)."""
        lm = self.lm
        past, num_new = cache.length, position_ids.shape[1]
        captured: dict[str, list] = {"hidden": [], "attn": []}
        hooks = lm._install_hooks(hidden_layer, attention_heads, captured)
        try:
            with self.kernels(prefill=past == 0):
                if isinstance(cache, StaticKVCache):     # hooks are Python: those forwards run whole, not as graphs
                    ids, embeds = (model_inputs[key][0] if key in model_inputs else None
                                   for key in ("input_ids", "inputs_embeds"))
                    logits = self.static.run(cache, ids, embeds, position_ids[0], parents, logits_rows,
                                             whole=bool(hooks))
                else:
                    kwargs = {} if logits_rows is None else {"logits_to_keep": _logits_to_keep(logits_rows, num_new)}
                    attention_mask = _attention_mask(lm, visible, parents, past, position_ids[0])
                    output = lm.model(**model_inputs, past_key_values=cache.hf_cache, use_cache=True,
                                      position_ids=position_ids, attention_mask=attention_mask, **kwargs)
                    logits = output.logits[0].float()
        finally:
            for hook in hooks:
                hook.remove()
        check_finite(logits)
        result = ForwardOutput(logits=logits)
        if hidden_layer is not None:
            result.hidden = captured["hidden"][0] if captured["hidden"] else None
        if attention_heads:
            rows = captured["attn"]
            if isinstance(rows, AttentionQueries):
                result.attention = rows
            else:
                if any(r is None for r in rows):
                    raise InvalidOptionError(f"{lm.name} returned no attention weights from its eager kernel; "
                                             "pass heads=... of standard attention layers")
                result.attention = torch.stack(rows)[..., : past + num_new]  # (heads, T, kv_len); static: slots
        return result

    def packed(self, arena, ids: list, positions: list, visible: torch.Tensor, wanted: list, layers: list,
               dense: bool) -> tuple[torch.Tensor, dict]:
        """The engine's packed forward (packed.py has set the arena's write slots; visible: (T, S) bool, or one per
        kind of layer for a sliding-window model): (logits of the wanted rows, {layer: hidden states of every
        row})."""
        lm = self.lm
        device = lm.device
        captured = {layer: {"hidden": [], "attn": []} for layer in layers}
        hooks = [hook for layer in layers for hook in lm._install_hooks(layer, None, captured[layer])]
        try:
            with self.kernels(prefill=dense):
                output = lm.model(input_ids=torch.tensor([ids], device=device),
                                  position_ids=torch.tensor([positions], device=device),
                                  attention_mask=_additive_masks(visible, lm.dtype, device), past_key_values=arena,
                                  use_cache=True, logits_to_keep=torch.tensor(wanted))
        finally:
            for hook in hooks:
                hook.remove()
        return output.logits[0].float(), {layer: captured[layer]["hidden"][0] for layer in layers}


def _additive_masks(visible, dtype: torch.dtype, device):
    """additive_mask of a (T, S) bool matrix, or of each in a {layer kind: matrix} dict (HF takes either)."""
    if isinstance(visible, dict):
        return {kind: additive_mask(allowed, dtype, device) for kind, allowed in visible.items()}
    return additive_mask(visible, dtype, device)


def _attention_mask(lm, visible, parents, past: int, positions: torch.Tensor):
    """HF's attention_mask for a forward with `visible` (LM.forward's (allowed (T, S), positions)) or a tree's
    `parents` (neither: None, HF's own causal masks).
    A model with sliding-window layers gets one mask per layer type: HF takes a custom mask as it is, so its
    window is applied here (kv_cache.windowed), or a tree node past the window would see keys greedy does not."""
    if visible is None and parents is None:
        return None
    allowed = visible[0].to(torch.bool) if visible is not None else visible_keys(parents, past, len(parents))
    window = sliding_window(lm.model)
    if window is None:
        return additive_mask(allowed, lm.dtype, lm.device)
    return {"full_attention": additive_mask(allowed, lm.dtype, lm.device),
            "sliding_attention": additive_mask(windowed(allowed, positions.cpu(), window), lm.dtype, lm.device)}


def _logits_to_keep(rows: slice, num_new: int):
    if rows == slice(-1, None):
        return 1
    indices = list(range(num_new))[rows]
    return torch.tensor(indices, dtype=torch.long)   # (an empty list would make a float tensor)
