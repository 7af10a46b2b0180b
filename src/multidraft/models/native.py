"""The native forward: Llama-family decoder layers written out over the GGUF blocks, no HF module in the loop.

A quantized model (quantized.py) runs HF's modeling code: per token and layer, a dozen Python modules, hooks,
mask builders and cache objects around the kernels. This forward reads the same blocks and small tensors out of
that model once and runs a token with one loop over the layers: embeddings (dequantize), RMSNorm, the q/k/v
linears (+ Qwen2's biases), rotary, grouped-query attention over the KV cache (the batch-invariant kernel), the
o linear, the gated SiLU MLP and the LM head.

Exactness. Around the linears it performs the very fp32 operations HF's modeling_llama / modeling_qwen2 perform,
in the same order (RMSNorm: x * rsqrt(mean(x^2) + eps), then weight *; rotary: positions x inv_freq, cat, cos/sin x
attention_scaling, q*cos + rotate_half(q)*sin; residual + branch; silu(gate) * up), and the linears and attention
are the same kernel calls (quantized.block_linear, gguf_kernels.attention). The residual + norm and the rotary run
as one kernel op each (gguf_kernels.add_rms_norm, rotary_heads: the same roundings, torch's own sum; the rotary
writes the keys and values straight into a GrowingKVCache; silu_mul: torch's silu, then the product), and linears
that read one input quantize it once (block_linears). So its
logits are the quantized runner's bits for the same tokens and activations mode, alone, in a verify, in a tree
or in the engine's packed forward (tests/test_native_runner.py checks it bit for bit), and every property the
quantized runner has (batch and thread invariance, exact prefix reuse in q8) carries over. With 8-bit activations,
on its own cache or on the engine's arena (the rows' keys and values written at its write_index), each layer is one
kernel op (gguf_kernels.decoder_layer: these steps' calls in C++, in this order, the same bits) and a forward that
captures and checks nothing runs all its layers in one (registered_stack: the layers' weights handed to the kernels
once, at load), which saves the Python and dispatch between the steps (~15% of a small model's forward; the 1.5B's
decode step of 8 requests in the engine 105 -> 75 ms).

Supported: Qwen2, Llama (SmolLM2 is one) and Mistral configs with SiLU MLPs, full causal attention and a rotary
whose frequencies do not depend on the sequence (default, linear, llama3, yarn); Qwen3's, which add per-head RMSNorms
of q and k before the rotary; and Gemma3's text model (the same layer
ops, with six norms): its embeddings scaled by sqrt(d), norms that multiply by 1 + weight (computed once at load, as HF
computes it per call), per-head RMSNorms of q and k, two rotary tables (sliding and full layers), sliding-window
layers (kv_cache.windowed: the window by the row's position, as HF's base runners now apply it too; on the engine's
arena packed.py windows each request's rows in its region), norms after the attention and after the MLP, and a
tanh-GELU MLP. Anything else (dynamic rotary, logit soft-capping) gets
`unsupported_reason` and stays on HF's modules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import torch

from multidraft.models import gguf_kernels
from multidraft.models.kv_cache import GrowingKVCache, StaticArena, sliding_window, unserved_layer_kinds, windowed
from multidraft.models.quantized import block_linear, block_linears

ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                 "Gemma3ForCausalLM")
GEMMA = "Gemma3ForCausalLM"
HEAD_NORMS = (GEMMA, "Qwen3ForCausalLM")        # RMSNorms of each query and key head before the rotary
FULL, SLIDING = "full_attention", "sliding_attention"
STATIC_ROTARY = ("default", "linear", "llama3", "yarn")      # inv_freq fixed at load
ROTARY_BLOCK = 256        # positions per rotary table block: 256 x D values, one torch call (under its 32768 grain)


def unsupported_reason(model) -> Optional[str]:
    """Why the native forward cannot run `model` (a quantized model), or None when it can."""
    if not hasattr(model, "gguf_weights"):
        return "it runs on GGUF blocks only (load the model with a quantized runner)"
    name = type(model).__name__
    if name not in ARCHITECTURES:
        return f"{name} is not one of the native architectures ({', '.join(ARCHITECTURES)})"
    why = _gemma_reason(model) if name == GEMMA else _llama_reason(model)
    if why is not None:
        return why
    base = model.model
    for kind in dict.fromkeys(_layer_kinds(model)):
        if getattr(base.rotary_emb, _inv_freq_name(model, kind), None) is None:
            return "its rotary has no fixed frequencies"
    for layer in base.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for linear in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj):
            if getattr(linear, "gguf_matrix", None) is None:
                return "a linear is not on GGUF blocks"
        if name not in HEAD_NORMS and getattr(attn, "q_norm", None) is not None:
            return "its attention has per-head norms"
        if name != GEMMA and getattr(attn, "sliding_window", None):
            return "its attention has a sliding window"
    if getattr(model.lm_head, "gguf_matrix", None) is None:
        return "its LM head is not on GGUF blocks"
    return None


def _llama_reason(model) -> Optional[str]:
    from multidraft.models.static_runner import unsupported_reason as attention_reason

    config = model.config
    why = attention_reason(model)
    if why is not None:
        return why
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"its MLP uses {config.hidden_act}, not silu"
    rope = (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default")
    if rope not in STATIC_ROTARY:
        return f"its rotary ({rope}) changes with the sequence"
    return None


def _gemma_reason(model) -> Optional[str]:
    config = model.config
    if getattr(config, "hidden_activation", None) != "gelu_pytorch_tanh":
        return f"its MLP uses {getattr(config, 'hidden_activation', None)}, not gelu_pytorch_tanh"
    if config.attn_logit_softcapping is not None or config.final_logit_softcapping is not None:
        return "it soft-caps its logits"
    if getattr(config, "use_bidirectional_attention", False):
        return "its attention is bidirectional"
    if unserved_layer_kinds(model):
        return f"its layers use {', '.join(unserved_layer_kinds(model))}"
    for kind in set(config.layer_types):
        rope = (config.rope_parameters.get(kind) or {}).get("rope_type")
        if rope not in STATIC_ROTARY:
            return f"its {kind} rotary ({rope}) changes with the sequence"
    return None


def _layer_kinds(model) -> list[str]:
    """Each layer's attention kind: Gemma3's config names it, every other native model is full attention."""
    return list(model.config.layer_types) if type(model).__name__ == GEMMA else [FULL] * len(model.model.layers)


def _inv_freq_name(model, kind: str) -> str:
    return f"{kind}_inv_freq" if type(model).__name__ == GEMMA else "inv_freq"


@dataclass
class _GemmaNorms:
    """Gemma3's extra norms: after the attention and after the MLP."""

    attn_out: tuple
    mlp_out: tuple


@dataclass
class _Layer:
    """One decoder layer's weights: (matrix, bias) per linear, (weight, eps) per norm. mlp_norm: the norm before
    the MLP (Llama's post_attention_layernorm, Gemma3's pre_feedforward_layernorm)."""

    attn_norm: tuple
    q: tuple
    k: tuple
    v: tuple
    o: tuple
    mlp_norm: tuple
    gate: tuple
    up: tuple
    down: tuple
    kind: str = FULL
    head_norms: Optional[tuple] = None          # (q_norm, k_norm): per-head RMSNorms before the rotary (Gemma3, Qwen3)
    gemma: Optional[_GemmaNorms] = None


def _linear(module) -> tuple:
    return module.gguf_matrix, module.bias


def _norm(module) -> tuple:
    """(weight, eps): the weight the norm multiplies by; Gemma's 1 + weight, computed once as HF computes it."""
    if hasattr(module, "variance_epsilon"):
        return module.weight, float(module.variance_epsilon)
    return (1.0 + module.weight.float()).contiguous(), float(module.eps)


def _layer(layer, kind: str, gemma: bool) -> _Layer:
    attn, mlp = layer.self_attn, layer.mlp
    head_norms = (_norm(attn.q_norm), _norm(attn.k_norm)) if getattr(attn, "q_norm", None) is not None else None
    extra = _GemmaNorms(_norm(layer.post_attention_layernorm), _norm(layer.post_feedforward_layernorm)) \
        if gemma else None
    return _Layer(_norm(layer.input_layernorm), _linear(attn.q_proj), _linear(attn.k_proj), _linear(attn.v_proj),
                  _linear(attn.o_proj),
                  _norm(layer.pre_feedforward_layernorm if gemma else layer.post_attention_layernorm),
                  _linear(mlp.gate_proj), _linear(mlp.up_proj), _linear(mlp.down_proj), kind, head_norms, extra)


class RotaryTable:
    """cos and signed sin by position for one set of rotary frequencies."""

    def __init__(self, inv_freq: torch.Tensor, scaling: float):
        self.inv_freq, self.scaling = inv_freq.float(), scaling
        self.head_dim = 2 * self.inv_freq.shape[0]
        self._tables = (torch.empty(0, self.head_dim),) * 2

    def __call__(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """rows(positions), read from tables grown on demand in blocks of ROTARY_BLOCK positions (two lookups per
        forward instead of ten small ops). Each table row has the bits of the same position computed in a forward
        of any number of rows: torch's cos/sin/products are elementwise and run all-vector when a call's values
        fill whole vectors (T * D a multiple of 32, the widest vector pair: AVX-512's), which a head dimension
        that is a multiple of 32 guarantees; other head dimensions compute per forward."""
        if self.head_dim % 32:
            return self.rows(positions)
        listed = positions.tolist()
        needed, (cos, sin) = max(listed) + 1, self._tables          # one read: a pair grown together
        if needed > cos.shape[0]:
            blocks = [self.rows(torch.arange(start, start + ROTARY_BLOCK))
                      for start in range(cos.shape[0], max(needed, 2 * cos.shape[0]), ROTARY_BLOCK)]
            cos, sin = torch.cat([cos] + [c for c, _ in blocks]), torch.cat([sin] + [s for _, s in blocks])
            self._tables = cos, sin
        if listed == list(range(listed[0], listed[0] + len(listed))):     # a chain: rows of the tables, no copy
            return cos[listed[0]:needed], sin[listed[0]:needed]
        return cos[positions], sin[positions]

    def rows(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin (T, D) of positions (T,): the HF rotary embedding's cos and sin (Qwen2, Llama,
        Gemma3: positions x inv_freq, cat, cos/sin x attention_scaling), with the sin's first half negated (see
        _rotary_heads)."""
        freqs = positions[:, None].float() * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos() * self.scaling, emb.sin() * self.scaling
        half = sin.shape[-1] // 2
        return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


@dataclass
class NativeOutput:
    logits: torch.Tensor                                   # (rows kept, V)
    hidden: dict = field(default_factory=dict)             # layer -> (T, d), as HF's hidden_states[layer]
    queries: dict = field(default_factory=dict)            # layer -> [(queries (T, D), keys (S, D), scaling)] per head


class NativeForward:
    """The forward of one quantized Llama-family model (check `unsupported_reason` first)."""

    def __init__(self, model):
        base = model.model
        gemma = type(model).__name__ == GEMMA
        self.mode = model.gguf_mode                         # shared with the HF modules: "fp32" or "q8" activations
        self.embedding = base.embed_tokens.gguf_matrix
        self.embed_scale = getattr(base.embed_tokens, "embed_scale", None)     # Gemma's sqrt(d), as HF multiplies
        kinds = _layer_kinds(model)
        self.layers = [_layer(layer, kind, gemma) for layer, kind in zip(base.layers, kinds)]
        self.final_norm = _norm(base.norm)
        self.head = _linear(model.lm_head)
        rotary = base.rotary_emb
        self.rotaries = {kind: RotaryTable(getattr(rotary, _inv_freq_name(model, kind)),
                                           getattr(rotary, f"{kind}_attention_scaling" if gemma else
                                                   "attention_scaling"))
                         for kind in dict.fromkeys(kinds)}
        self.window = sliding_window(model)
        attn = base.layers[0].self_attn
        self.head_dim, self.scaling = int(attn.head_dim), float(attn.scaling)
        self.num_heads = int(model.config.num_attention_heads)
        self.kv_heads = self.layers[0].k[0].rows // self.head_dim
        # each residual add runs with the norm after it: the next layer's (or the final) norm ends a layer
        self._norms_after = [layer.attn_norm for layer in self.layers[1:]] + [self.final_norm]
        self._fused = [_fused_layer(layer, after) for layer, after in zip(self.layers, self._norms_after)]
        self.fuse = all(pack is not None for pack in self._fused)     # tests turn it off to compare
        self.fuse_stack = self.fuse             # all layers in one op when a forward captures and checks nothing
        self._kind_index = [list(self.rotaries).index(layer.kind) for layer in self.layers]     # the stack's
        self._stack = gguf_kernels.RegisteredStack(
            *([item for pack in self._fused for item in pack[part]] for part in range(5)), self._kind_index) \
            if self.fuse else None

    # ----- the pieces, as HF computes them -----
    def _linear(self, weights: tuple, x: torch.Tensor, prefill: bool) -> torch.Tensor:
        return block_linear(weights[0], x, self.mode.activations, weights[1], prefill)

    def _linears(self, weights: Sequence[tuple], x: torch.Tensor, prefill: bool) -> list:
        """Linears that read the same input (q, k, v; gate, up): quantized once in q8, the same bits."""
        return block_linears([w[0] for w in weights], x, self.mode.activations, [w[1] for w in weights], prefill)

    # ----- the forward -----
    @torch.inference_mode()
    def run(self, cache, input_ids: Optional[torch.Tensor], embeds: Optional[torch.Tensor], positions: torch.Tensor,
            visible: torch.Tensor, keep_rows=None, hidden_layers: Sequence[int] = (),
            heads_by_layer: Optional[dict] = None, prefill: bool = False, watch=None) -> NativeOutput:
        """New rows (input_ids (T,) or embeds (T, d)) at `positions` (T,), appended to `cache` (HF's DynamicCache,
        a GrowingKVCache (the caller advances it after) or a StaticArena with its write_index set); visible (T, S)
        bool: which cached/new keys each row sees, S the keys the cache holds after this forward (an arena: at least
        its kv_limit); for a sliding-window model on an arena, {"full_attention": ..., "sliding_attention": ...}.
        keep_rows: rows that get logits (a slice or index tensor; None: all). Captures: hidden states after the
        given layers (0 = embeddings) and, per layer, the post-rotary queries of the chosen heads with the layer's
        keys. watch: the LM's WatchPoints
        (forward_watch.py), called where HF's modules would fire their pre-hooks: a deadline or a cancel it raises
        stops the forward within one layer, and a request running in turns waits before its forward."""
        try:
            return self._run(cache, input_ids, embeds, positions, visible, keep_rows, hidden_layers, heads_by_layer,
                             prefill, watch)
        finally:
            gguf_kernels.release_layer_scratch()      # the fused layers' MLP buffers, reused across this forward

    def _run(self, cache, input_ids, embeds, positions, visible, keep_rows, hidden_layers, heads_by_layer, prefill,
             watch) -> NativeOutput:
        if watch is not None:
            watch.before_forward()
        out = NativeOutput(logits=torch.empty(0))
        x = self._embed(input_ids, embeds)
        tables = {kind: rotary(positions) for kind, rotary in self.rotaries.items()}
        visible_by_kind = self._visible_by_kind(cache, visible, positions)
        rows, width = x.shape[1], visible_by_kind[FULL].shape[1]
        if 0 in hidden_layers:
            out.hidden[0] = x[0]
        x, h = _add_rms_norm(x, None, *self.layers[0].attn_norm)
        # A GrowingKVCache takes the rows at [length, length + rows), an arena (the engine's packed forward) at its
        # write_index: either way the kernel ops write the keys and values themselves.
        growing = isinstance(cache, GrowingKVCache)
        fused = self.fuse and self.mode.activations == "q8" and (growing or isinstance(cache, StaticArena))
        start, row_slots = (cache.length, None) if growing else (0, getattr(cache, "write_index", None))
        if fused and self.fuse_stack and not heads_by_layer and all(layer == 0 for layer in hidden_layers) \
                and (watch is None or not watch.checks_layers):
            keys, values = cache.rooms(len(self.layers), rows, self.kv_heads, self.head_dim, x)
            kinds = list(self.rotaries)                 # a mask as wide as the keys it shows: slots past it unseen
            x, h = gguf_kernels.registered_stack(x, h, self._stack, [tables[kind][0] for kind in kinds],
                                                 [tables[kind][1] for kind in kinds], keys, values, start,
                                                 [visible_by_kind[kind] for kind in kinds], self.scaling, row_slots)
            return self._head(out, h, keep_rows, prefill)
        for index, layer in enumerate(self.layers):
            if watch is not None:
                watch.before_layer()
            if fused:                                   # the steps below in one kernel op, the same bits
                keys, values = cache.room(index, rows, self.kv_heads, self.head_dim, x)
                seen = visible_by_kind[layer.kind]
                x, h, q = gguf_kernels.decoder_layer(x, h, *self._fused[index], *tables[layer.kind], keys, values,
                                                     start, seen, self.scaling, row_slots)
                self._captures(out, index, q, keys[0], width, hidden_layers, heads_by_layer, x, copy=True)
                continue
            q, k, v = self._linears((layer.q, layer.k, layer.v), h, prefill)
            if layer.head_norms is not None:
                q_norm, k_norm = layer.head_norms
                q, k = _head_norm(q, *q_norm, self.head_dim), _head_norm(k, *k_norm, self.head_dim)
            layer_cos, layer_sin = tables[layer.kind]
            if isinstance(cache, GrowingKVCache):       # k and v written into the cache by the rotary op
                keys, values = cache.room(index, rows, k.shape[-1] // self.head_dim, self.head_dim, k)
                q = _rotary_store(q, k, v, layer_cos, layer_sin, keys, values, cache.length)
                keys, values = keys[0], values[0]
            else:
                q, k = _rotary_heads(q, k, layer_cos, layer_sin)                 # (H, T, D), (1, KVH, T, D)
                keys, values = _store(cache, index, k, v.view(1, rows, -1, self.head_dim).transpose(1, 2))
            seen = visible_by_kind[layer.kind]
            attn = gguf_kernels.attention(q, keys, values, seen, self.scaling)
            attn = self._linear(layer.o, attn.reshape(1, rows, -1), prefill)
            if layer.gemma is not None:                 # Gemma normalizes the branch before the residual add
                attn = _add_rms_norm(attn, None, *layer.gemma.attn_out)[1]
            x, h = _add_rms_norm(x, attn, *layer.mlp_norm)
            gate, up = self._linears((layer.gate, layer.up), h, prefill)
            product = (_gelu_tanh_mul if layer.gemma is not None else _silu_mul)(gate, up)
            mlp = self._linear(layer.down, product, prefill)
            if layer.gemma is not None:
                mlp = _add_rms_norm(mlp, None, *layer.gemma.mlp_out)[1]
            x, h = _add_rms_norm(x, mlp, *self._norms_after[index])
            self._captures(out, index, q, keys, width, hidden_layers, heads_by_layer, x,
                           copy=isinstance(cache, GrowingKVCache))
        return self._head(out, h, keep_rows, prefill)

    def _embed(self, input_ids: Optional[torch.Tensor], embeds: Optional[torch.Tensor]) -> torch.Tensor:
        """(1, T, d): the tokens' embeddings (Gemma's scaled as HF scales them), or the embeddings given (as HF
        takes inputs_embeds: unscaled)."""
        if embeds is not None:
            return embeds.float()[None]
        x = self.embedding.dequantize(input_ids.reshape(-1).cpu())[None]
        return x if self.embed_scale is None else x * self.embed_scale.to(x.dtype)

    def _visible_by_kind(self, cache, visible, positions: torch.Tensor) -> dict:
        """Each kind of layer's (T, S) visibility: the forward's, and for sliding-window layers the same windowed by
        position (given by packed.py on the engine's arena, whose slots are not positions)."""
        if isinstance(visible, dict):
            return dict(visible)
        if self.window is None:
            return {FULL: visible}
        if isinstance(cache, StaticArena):
            raise ValueError("a sliding-window model's forward on an arena needs its masks by kind of layer "
                             "(packed.py builds them: the arena's slots are not positions)")
        return {FULL: visible, SLIDING: windowed(visible, positions, self.window)}

    def _head(self, out: NativeOutput, h: torch.Tensor, keep_rows, prefill: bool) -> NativeOutput:
        """The LM head on the final norm `h` of the rows kept (row-wise: the same bits)."""
        if keep_rows is not None:
            h = h[:, keep_rows]
        out.logits = self._linear(self.head, h, prefill)[0]
        return out

    def _captures(self, out: NativeOutput, index: int, q: torch.Tensor, keys: torch.Tensor, width: int,
                  hidden_layers: Sequence[int], heads_by_layer: Optional[dict], x: torch.Tensor, copy: bool) -> None:
        """Layer `index`'s captures: the hidden state after it, the chosen heads' queries with their keys."""
        if index + 1 in hidden_layers:
            out.hidden[index + 1] = x[0]
        if heads_by_layer and index in heads_by_layer:
            # a GrowingKVCache's buffer is written in place by later forwards: the capture keeps a copy
            seen = keys[:, :width].clone() if copy else keys
            out.queries[index] = self._queries(q, seen, heads_by_layer[index])

    def _queries(self, q: torch.Tensor, keys: torch.Tensor, heads: Sequence[int]) -> list:
        """What attention_rows' hooks keep: per head (its queries (T, D), its KV head's keys (S, D), scaling)."""
        groups = self.num_heads // keys.shape[0]
        shared = {kv: keys[kv] for kv in {head // groups for head in heads}}        # one object per KV head
        return [(q[head], shared[head // groups], self.scaling) for head in heads]


def _fused_layer(layer: _Layer, norm_after: tuple) -> Optional[tuple]:
    """decoder_layer's weight arguments (blocks, types, q/k/v biases, norms, eps) for a layer whose linears all take
    8-bit activations (in any mix of activation blocks), none packed with padding rows, and whose o and down have no
    bias; None for another layer (it runs step by step). Norms: the pre-MLP norm and the norm after the layer;
    Qwen3's four (q, k, pre-MLP, after); Gemma3's six (q, k, the attention's output, pre-MLP, the MLP's output,
    after)."""
    linears = (layer.q, layer.k, layer.v, layer.o, layer.gate, layer.up, layer.down)
    if not all(matrix.shares_q8_kernel for matrix, _ in linears) or layer.o[1] is not None or layer.down[1] is not None:
        return None
    g = layer.gemma
    heads = list(layer.head_norms or ())
    norms = heads + ([layer.mlp_norm, norm_after] if g is None else [g.attn_out, layer.mlp_norm, g.mlp_out,
                                                                      norm_after])
    return ([matrix.q8_weights[0] for matrix, _ in linears], [matrix.q8_weights[1] for matrix, _ in linears],
            [layer.q[1], layer.k[1], layer.v[1]], [weight for weight, _ in norms], [eps for _, eps in norms])


def _add_rms_norm(x: torch.Tensor, branch: Optional[torch.Tensor], weight: torch.Tensor,
                  eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + branch, its RMSNorm): HF's residual add, then Qwen2RMSNorm / LlamaRMSNorm in fp32,
    weight * (x * rsqrt(mean(x^2) + eps)), in one kernel op with torch's bits (kernels/layer_ops.inc)."""
    return gguf_kernels.add_rms_norm(x, branch, weight, eps)


def _rotary_heads(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor):
    """HF's apply_rotary_pos_emb, x * cos + rotate_half(x) * sin with rotate_half(x) = (-x2, x1), on the q and k
    linears' outputs (1, T, heads * D): rotate_half(x) * sin = roll(x) * (-sin1, sin2) exactly (a product's sign is
    exact), so each value goes through the same two roundings (the products, then their sum); one kernel op that
    also lays q out as (H, T, D) and k as (1, KVH, T, D)."""
    return gguf_kernels.rotary_heads(q, k, cos, signed_sin)


def _rotary_store(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor,
                  keys: torch.Tensor, values: torch.Tensor, start: int) -> torch.Tensor:
    """_rotary_heads' q (H, T, D), with its k and the v (1, T, KVH * D) written into a GrowingKVCache layer's
    buffers (1, KVH, slots, D) at [start, start + T): the values _store would write, without its copies."""
    return gguf_kernels.rotary_store(q, k, v, cos, signed_sin, keys, values, start)


def _head_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, head_dim: int) -> torch.Tensor:
    """Gemma3's and Qwen3's q_norm / k_norm on a linear's output (1, T, heads * D): RMSNorm of each head's D values
    (rows are independent: the bits of HF's norm on its (1, heads, T, D) view)."""
    return _add_rms_norm(x.reshape(-1, head_dim), None, weight, eps)[1].view(x.shape)


def _gelu_tanh_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Gemma3's MLP product: HF's gelu_pytorch_tanh (torch's gelu, approximate="tanh"), then the product."""
    return torch.nn.functional.gelu(gate, approximate="tanh") * up


def _silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """HF's act_fn(gate_proj(x)) * up_proj(x) with SiLU: torch's silu, then the product, in one kernel op."""
    return gguf_kernels.silu_mul(gate, up)


def _store(cache, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Append this forward's keys/values (1, KVH, T, D) to the cache; the layer's keys and values (KVH, S, D)."""
    keys, values = cache.update(k, v, layer)
    if isinstance(cache, (StaticArena, GrowingKVCache)):  # whole buffers: contiguous, so the kernel copies nothing
        return cache.keys[layer][0], cache.values[layer][0]
    return keys[0], values[0]
