"""The quantized runner's model: HF's modeling code with its linears, embeddings and attention on GGUF blocks.

What the model is. Every weight matrix (the linears, the token embeddings and the LM head) keeps the GGUF's own
blocks, and its values are their exact fp32 dequantization (what gguf-py's `dequantize` gives, bit for bit).
Small tensors (norms, biases) are the GGUF's F32 values, read through the HF folder's conversion rule (the
folder is the reference for which transform, e.g. Gemma's norm offset, applies); anything the GGUF lacks comes
from the HF folder. For a user's own GGUF file that folder is only the reference part of its conversion
(gguf_to_hf.write_reference: config, tokenizer, norms, the rows each matrix is checked against). Activations,
accumulation and the KV cache are fp32. So this model is closer to the GGUF than the bf16 HF folder the eager
runner loads (which rounds every weight to bf16).

Exactness. Every part of a forward is batch-invariant: the linears (gguf_kernels: each output is the same fp32
dot product in the same order for any number of rows), attention (per query row over exactly the keys it sees, in
key order), and the row-wise parts HF runs (norms, rotary, activations). A token's logits and KV are therefore
the same bits alone, inside a verify of any length, or in a tree; every lossless method is token-identical to
greedy on this runner by construction. The one exception is a prefill (a forward on an empty cache) longer than
`PREFILL_GEMM_ROWS` rows, which goes through a dense GEMM for speed; greedy and every drafting method run the same
prefill, so this does not touch exactness between methods.

8-bit activations (runner "quantized-q8", the default for "auto"). llama.cpp quantizes each linear's input row to int8 (one scale
per 256 values for the K formats, per 32 for the others) and computes integer dot products: ~2x faster here, and the
model llama.cpp users run. Q4_K / Q6_K (the Qwen GGUFs) and Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0 (SmolLM2's) matrices
compute that way (gguf_kernels' `linear_q8`), and Q5_K (Q5_K_M GGUFs); F16, F32 and BF16 keep fp32 activations. Each row's quantization depends on that row only and the integer sums are exact, so
this mode is batch-invariant too, prefills included (they skip the dense GEMM): lossless methods stay
token-identical to this mode's greedy. It is a different model from the fp32 one (logits differ by the 8-bit
rounding of activations): the model GGUF users run in llama.cpp; "quantized" keeps the fp32 one as the reference.

Memory: the blocks are mapped from the GGUF file (the 1.5B: 1.1 GB), not copied; no fp32 weight matrix is kept.
"""

from __future__ import annotations

import functools
import os
import threading
import types
import warnings
from pathlib import Path
from typing import Optional

import torch

from multidraft.errors import MultidraftError
from multidraft.models import fast_linear, gguf_kernels, safetensors_files
from multidraft.models.gguf_to_hf import REFERENCE_FILE, is_reference, reference_rows
from multidraft.models.gguf_weights import BlockMatrix, GGUFWeights
from multidraft.models.kv_cache import with_spare_slots

ATTENTION = "multidraft_invariant"
# A prefill (empty cache) of more rows than this dequantizes each weight once into a dense GEMM (oneDNN).
PREFILL_GEMM_ROWS = 64


class QuantizedUnsupported(MultidraftError):
    """This model cannot run on the quantized runner (the caller falls back with one warning). machine: the reason is
    this machine (no AVX2, the kernels' build failed), not the model, so it is worth a warning under runner "auto"
    too, where a model the runner does not fit falls back silently."""

    def __init__(self, message: str, machine: bool = False):
        super().__init__(message)
        self.machine = machine


def require_kernels(progress: bool = True) -> None:
    """Build or load the quantized kernels, or raise QuantizedUnsupported saying why they cannot run here."""
    if not gguf_kernels.load(progress):
        # MULTIDRAFT_NO_KERNEL_BUILD is the user's own choice, not the machine's failing
        raise QuantizedUnsupported(gguf_kernels.unavailable_reason() or "the quantized kernels are not available",
                                   machine=not os.environ.get("MULTIDRAFT_NO_KERNEL_BUILD"))


def register_attention() -> None:
    """Make `attn_implementation="multidraft_invariant"` known to transformers (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, invariant_attention)
    # Boolean masks always (never "causal, skip the mask"), sliding windows included.
    AttentionMaskInterface.register(ATTENTION, functools.partial(sdpa_mask, allow_is_causal_skip=False))


def invariant_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """HF attention function: query (B, H, T, D), key/value (B, KVH, S, D) -> ((B, T, H, D), None)."""
    if getattr(module, "attn_logit_softcapping", None) or kwargs.get("s_aux") is not None:
        raise QuantizedUnsupported(f"{type(module).__name__} uses logit soft-capping or sinks")
    batch, _, rows, head_dim = query.shape
    keys = key.shape[2]
    scaling = head_dim ** -0.5 if scaling is None else scaling
    key, value = with_spare_slots(key), with_spare_slots(value)   # the kernel reads the mask's `keys` columns only
    outputs = []
    for b in range(batch):
        if attention_mask is None:             # plain causal: row t sees keys up to its own position
            positions = torch.arange(keys, device=query.device)
            visible = positions[None, :] <= positions[-rows:, None]
        else:
            mask = attention_mask[b if attention_mask.shape[0] > 1 else 0, 0, :, :keys]
            visible = mask if mask.dtype == torch.bool else mask == 0
        outputs.append(gguf_kernels.attention(query[b].float(), key[b].float(), value[b].float(), visible, scaling))
    return torch.stack(outputs).to(query.dtype), None


# ---------------------------------------------------------------- linears and embeddings on blocks


ACTIVATIONS = ("fp32", "q8")


class _Mode:
    """How a quantized model's linears treat their inputs; one object shared by all of them, so it can switch."""

    def __init__(self, activations: str):
        self.activations = activations


def set_activations(model, activations: str) -> None:
    """activations: "fp32", "q8", or "auto" (q8 where some matrix has an 8-bit kernel, else fp32, silently)."""
    if activations not in ACTIVATIONS + ("auto",):
        raise ValueError(f"activations must be one of {ACTIVATIONS}, got {activations!r}")
    has_q8 = any(getattr(m, "gguf_matrix", None) is not None and m.gguf_matrix.has_q8_kernel
                 for m in model.modules() if isinstance(m, torch.nn.Linear))
    if activations == "auto":
        activations = "q8" if has_q8 else "fp32"
    if activations == "q8" and not has_q8:
        warnings.warn("multidraft: no matrix of this GGUF has an 8-bit kernel (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, "
                      "the K and IQ2 / IQ3 / IQ4_XS formats), so 8-bit activations change nothing (quantized-q8 runs "
                      "as quantized)",
                      RuntimeWarning, stacklevel=3)
    model.gguf_mode.activations = activations
    if activations == "q8":
        weights = getattr(model, "gguf_weights", None)
        for module in model.modules():
            matrix = getattr(module, "gguf_matrix", None)
            if isinstance(module, torch.nn.Linear) and matrix is not None and matrix.packed is None:
                matrix.pack_for_q8()
                if matrix.packed is not None and weights is not None and not weights.release(matrix.blocks):
                    matrix.drop_plain()           # a converted copy (Q3_K, IQ3_S): made again if ever read


def runner_name(model) -> str:
    """The runner name of a quantized model in its current mode: "quantized" or "quantized-q8"."""
    return "quantized-q8" if model.gguf_mode.activations == "q8" else "quantized"


def block_linear(matrix: BlockMatrix, x: torch.Tensor, activations: str, bias: Optional[torch.Tensor] = None,
                 prefill: bool = False) -> torch.Tensor:
    """x @ W^T (+ bias) on a matrix's blocks: the one linear of the quantized runners (HF modules and native.py).
    q8 activations where the format has that kernel; in a prefill of many rows, a dense GEMM for the others."""
    rows = x.numel() // max(1, x.shape[-1])
    q8 = activations == "q8" and matrix.has_q8_kernel
    if rows > PREFILL_GEMM_ROWS and prefill and not q8:
        weight = matrix.dequantize()              # transient: one matrix at a time
        if fast_linear.ONEDNN:                    # faster than MKL's sgemm here (fast_path.md section 8)
            out = torch.ops.mkldnn._linear_pointwise(x.float(), weight, None, "none", [], "")
        else:
            out = torch.nn.functional.linear(x.float(), weight)
    else:
        out = matrix.linear(x.float(), q8=q8)
    if bias is not None:
        out = out + bias
    return out


def block_linears(matrices: list, x: torch.Tensor, activations: str, biases: list, prefill: bool = False) -> list:
    """[block_linear(m, x, activations, b, prefill) for m, b in zip(matrices, biases)], the same bits, with the
    input quantized once per activation block when every matrix takes it in 8 bits (gguf_kernels' linear_q8_many:
    q, k, v or gate, up of one layer)."""
    if activations == "q8" and all(m.shares_q8_kernel for m in matrices):
        weights = [m.q8_weights for m in matrices]
        return gguf_kernels.linear_q8_many(x.float(), [blocks for blocks, _ in weights],
                                           [type_id for _, type_id in weights], matrices[0].width, list(biases))
    return [block_linear(m, x, activations, b, prefill) for m, b in zip(matrices, biases)]


def _linear_forward(self, x: torch.Tensor) -> torch.Tensor:
    return block_linear(self.gguf_matrix, x, self.gguf_mode.activations, self.bias, getattr(_prefill, "active", False))


def _embedding_forward(self, input_ids: torch.Tensor) -> torch.Tensor:
    matrix: BlockMatrix = self.gguf_matrix
    out = matrix.dequantize(input_ids.reshape(-1).cpu()).reshape(*input_ids.shape, matrix.width)
    scale = getattr(self, "embed_scale", None)          # Gemma scales its embeddings inside the module's forward
    return out * scale.to(out.dtype) if scale is not None else out


class _PrefillFlag(threading.local):
    active = False


_prefill = _PrefillFlag()


class prefill_gemm:
    """Inside this block (this thread), linears with more than PREFILL_GEMM_ROWS rows use a dense GEMM."""

    def __enter__(self):
        self.previous, _prefill.active = _prefill.active, True

    def __exit__(self, *exc):
        _prefill.active = self.previous


def _placeholder(rows: int, width: int) -> torch.nn.Parameter:
    """A weight of the right shape that holds no memory (one zero, broadcast): the values live in the blocks.
    Code that needs real rows asks the runner (`LM.unembedding`)."""
    return torch.nn.Parameter(torch.zeros(1).expand(rows, width), requires_grad=False)


# ---------------------------------------------------------------- building the model


def load_quantized_model(folder: Path, gguf_path: Path, activations: str = "fp32"):
    """The HF model of `folder` with its weights from the GGUF at `gguf_path` (see the module docstring);
    activations "q8" for llama.cpp's 8-bit activations where the format allows ("auto": q8 where it computes)."""
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    require_kernels()
    register_attention()
    config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=ATTENTION, dtype=torch.float32)
    weights = GGUFWeights(gguf_path, int(text_config.num_hidden_layers))
    reference = _FolderTensors(folder)
    mode = _Mode("fp32")
    embedding = model.get_input_embeddings()
    matrices: dict[str, BlockMatrix] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding) and module is embedding:
            matrix = _checked_matrix(weights, reference, f"{name}.weight", text_config)
            matrices[name] = matrix
            module.gguf_matrix = matrix
            module.weight = _placeholder(matrix.rows, matrix.width)
            module.forward = types.MethodType(_embedding_forward, module)
    output = model.get_output_embeddings()
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear):
            continue
        tied = module is output and weights.gguf_name(f"{name}.weight") is None
        if tied:                                       # tied LM head: the token embedding's blocks
            matrix = next(iter(matrices.values()))
        else:
            matrix = _checked_matrix(weights, reference, f"{name}.weight", text_config)
        if (matrix.rows, matrix.width) != (module.out_features, module.in_features):
            raise QuantizedUnsupported(f"{name}: the GGUF matrix is {matrix.rows}x{matrix.width}, the model expects "
                                       f"{module.out_features}x{module.in_features}")
        module.gguf_matrix = matrix
        module.gguf_mode = mode
        module.weight = embedding.weight if tied else _placeholder(matrix.rows, matrix.width)
        module.forward = types.MethodType(_linear_forward, module)
    _load_small_tensors(model, weights, reference)
    if (expansion := weights.expansion_warning()) is not None:
        warnings.warn(expansion, RuntimeWarning, stacklevel=2)
    model.eval()
    model.gguf_weights = weights           # keeps the file mapping alive
    model.gguf_mode = mode
    set_activations(model, activations)
    return model


def _checked_matrix(weights: GGUFWeights, reference: "_FolderTensors", hf_name: str, config) -> BlockMatrix:
    """The blocks of `hf_name`, checked against a few rows of the HF folder's conversion; rows reordered where
    the converter permuted them (llama.cpp stores Llama's q/k rows in its own rotary order)."""
    gguf_name = weights.gguf_name(hf_name)
    if gguf_name is None:
        raise QuantizedUnsupported(f"the GGUF has no tensor for {hf_name}")
    matrix = weights.matrix(gguf_name)
    expected = reference.rows(hf_name, matrix.rows)
    if expected is None:
        return matrix
    sample, values = expected
    if _close(matrix.dequantize(sample), values):
        return matrix
    for heads in (getattr(config, "num_key_value_heads", None), getattr(config, "num_attention_heads", None)):
        if heads and matrix.rows % (2 * heads) == 0:
            order = _rotary_order(matrix.rows, heads)
            if _close(matrix.dequantize(order[sample]), values):
                return matrix.select_rows(order)
    raise QuantizedUnsupported(f"the GGUF's {gguf_name} does not match {hf_name} of the converted folder")


def _rotary_order(rows: int, heads: int) -> torch.Tensor:
    """HF row i comes from GGUF row order[i]: within each head the converter interleaved the two rotary halves."""
    half = rows // heads // 2
    gguf_rows = torch.arange(rows).reshape(heads, half, 2)
    return gguf_rows.transpose(1, 2).reshape(rows)


def _close(ours: torch.Tensor, reference: torch.Tensor) -> bool:
    """The folder holds the same values rounded (bf16): equal within that rounding."""
    scale = float(reference.abs().max()) or 1.0
    return bool(((ours - reference).abs() <= 1e-2 * scale + 1e-2 * reference.abs()).all())


def _load_small_tensors(model, weights: GGUFWeights, reference: "_FolderTensors") -> None:
    """Every parameter still on the meta device: the GGUF's F32 values (under the transform that reproduces the
    folder's), else the folder's."""
    for name, param in list(model.named_parameters()):
        if param.device.type != "meta":
            continue
        value = reference.tensor(name)
        gguf_name = weights.gguf_name(name)
        if gguf_name is not None:
            exact = weights.dense(gguf_name)
            for candidate in (exact, exact - 1.0):      # Gemma's GGUF norms hold 1 + weight
                if candidate.shape == value.shape and torch.equal(candidate.to(value.dtype), value):
                    value = candidate
                    break
        module_name, _, attr = name.rpartition(".")
        module = model.get_submodule(module_name)
        setattr(module, attr, torch.nn.Parameter(value.float().contiguous(), requires_grad=False))


class _FolderTensors:
    """Tensors of the HF folder's safetensors, read one at a time (no full load); or of a GGUF conversion's
    reference part (gguf_to_hf.write_reference), which holds only the checked rows of each matrix."""

    def __init__(self, folder: Path):
        folder = Path(folder)
        self.rows_only = is_reference(folder)
        if (folder / safetensors_files.INDEX).is_file() and not self.rows_only:
            self._files = safetensors_files.indexed_files(folder)
        else:
            from safetensors import safe_open
            single = folder / (REFERENCE_FILE if self.rows_only else "model.safetensors")
            with safe_open(str(single), "pt") as handle:
                self._files = {name: single for name in handle.keys()}

    def _open(self, name: str):
        from safetensors import safe_open
        return safe_open(str(self._files[name]), "pt")

    def tensor(self, name: str) -> torch.Tensor:
        if name not in self._files:
            raise QuantizedUnsupported(f"neither the GGUF nor the HF folder holds {name}")
        with self._open(name) as handle:
            return handle.get_tensor(name)

    def rows(self, name: str, num_rows: int) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """(row indices, those rows as fp32) of a matrix, a few spread over it; None if the folder lacks it (or,
        in a reference part, holds a matrix of another height: the caller's shape check refuses that)."""
        if name not in self._files:
            return None
        sample = reference_rows(num_rows)
        with self._open(name) as handle:
            if self.rows_only:
                values = handle.get_tensor(name)
                return (sample, values.float()) if values.shape[0] == len(sample) else None
            part = handle.get_slice(name)
            values = torch.stack([part[int(i): int(i) + 1][0] for i in sample])
        return sample, values.float()
