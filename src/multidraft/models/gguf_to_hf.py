"""What the quantized runner reads of a GGUF's HF conversion, written in seconds without converting the weights.

The quantized runner computes on the GGUF's own blocks (models/quantized.py); of the HF folder transformers makes
from a GGUF it reads only the config, the tokenizer, the tensors that stay dense (norms, biases) and a few rows of
each matrix (`reference_rows`), which it checks its blocks against (names, Llama's q/k row order). Converting the
whole model for that took the 1.5B 70 s, 5.7 GB of RSS and 3.4 GB of disk, and a 7B-shaped GGUF 148 s, 7.9 GB and
15 GB (2026-12-05, benchmarks/results/2026-12-05-gguf-reference/). `write_reference` writes that part alone: each
dense tensor through transformers' own processor for the architecture (Gemma's norm offset), and of each matrix only
the checked rows, dequantized alone: the processor is run on the row numbers to learn which GGUF row becomes each HF
row. The 7B-shaped GGUF: 8 s and 25 MB (with pulling.transformers_reading).

Only architectures whose conversion is per tensor are written so: transformers' legacy GGUF loader with the plain,
Llama or Gemma processor. Others (mixture-of-experts processors gather experts across tensors; transformers' newer
GGUF path) and GGUFs that leave a weight of the model unset get None: the caller converts the whole model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

REFERENCE_FILE = "reference.safetensors"   # not an HF checkpoint's name: from_pretrained refuses the folder
_PER_TENSOR = ("TensorProcessor", "LlamaTensorProcessor", "Gemma2TensorProcessor")


def is_reference(folder: Path) -> bool:
    """Whether `folder` holds only what the quantized runner reads of a conversion (`write_reference`), not HF
    weights."""
    return (Path(folder) / REFERENCE_FILE).is_file()


def reference_rows(num_rows: int):
    """The rows of a matrix that the quantized runner checks against the HF conversion: six spread over it."""
    import torch
    return torch.unique(torch.linspace(0, num_rows - 1, 6).long())


@dataclass
class _Plan:
    """transformers' conversion of one GGUF, before any tensor is read."""

    config: object                 # the HF config
    model: object                  # the HF model on the meta device (names, ties, which modules are linears)
    processor: object              # transformers' per-tensor processor for the architecture
    parsed: dict                   # transformers' parsed metadata (the processors read it)
    hf_names: dict                 # GGUF tensor name -> HF parameter name
    tensors: list                  # the GGUF's tensors that become HF parameters, in file order


def _plan(gguf: Path) -> Optional[_Plan]:
    import torch
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers import modeling_gguf_pytorch_utils as hf_gguf
    from transformers.integrations.gguf.utils import is_gguf_arch_supported

    from multidraft.models.gguf_header import TensorReader

    reader = TensorReader(str(gguf))             # the tensors; transformers parses the metadata itself
    architecture = hf_gguf.read_field(reader, "general.architecture")[0]
    processor_class = hf_gguf.TENSOR_PROCESSORS.get(architecture, hf_gguf.TensorProcessor)
    if is_gguf_arch_supported(architecture) or processor_class.__name__ not in _PER_TENSOR:
        return None
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.tie_weights()                    # from_config on the meta device leaves a tied head untied
    parsed = hf_gguf.load_gguf_checkpoint(str(gguf), return_tensors=False)
    processor = processor_class(config=parsed.get("config", {}))
    hf_names = hf_gguf.get_gguf_hf_weights_map(model, processor)
    tensors = [tensor for tensor in reader.tensors if tensor.name in hf_names]
    given = {hf_names[tensor.name] for tensor in tensors}
    # A weight the GGUF leaves unset would be saved random; a tied head is listed once, as the embedding.
    if any(name not in given for name, _ in model.named_parameters()):
        return None
    return _Plan(config, model, processor, parsed, hf_names, tensors)


def write_reference(gguf: Path, folder: Path):
    """Write what the quantized runner reads (module docstring) into `folder`; returns the HF config, or None
    (nothing written) where the conversion is not per tensor."""
    import torch
    from safetensors.torch import save_file

    plan = _plan(Path(gguf))
    if plan is None:
        return None
    on_blocks = {f"{name}.weight" for name, module in plan.model.named_modules()
                 if isinstance(module, (torch.nn.Linear, torch.nn.Embedding))}
    kept = {}
    for tensor in plan.tensors:
        name = plan.hf_names[tensor.name]
        if name not in on_blocks or tensor.data.ndim != 2:
            kept.update([_converted(plan, tensor, _dequantized(tensor))])
            continue
        order = _row_order(plan, tensor)
        if order is None:                   # the processor does more than reorder rows: convert it whole
            name, values = _converted(plan, tensor, _dequantized(tensor))
            kept[name] = values[reference_rows(values.shape[0]).numpy()]
            continue
        rows = order[reference_rows(len(order)).numpy()]
        kept[name] = _dequantized(tensor, rows)
    save_file({name: _bf16(values) for name, values in kept.items()}, str(Path(folder) / REFERENCE_FILE),
              metadata={"format": "pt"})
    _write_config(plan, folder)
    return plan.config


def _processed(plan: _Plan, tensor, values: np.ndarray):
    """transformers' processor on values of one GGUF tensor: its (weights, name, metadata)."""
    return plan.processor.process(weights=values, name=tensor.name, tensor_key_mapping=plan.hf_names,
                                  parsed_parameters=plan.parsed)


def _converted(plan: _Plan, tensor, values: np.ndarray) -> tuple[str, np.ndarray]:
    """(HF name, HF values) of one GGUF tensor, from its fp32 values."""
    result = _processed(plan, tensor, values)
    return plan.hf_names[result.name], result.weights


def _row_order(plan: _Plan, tensor) -> Optional[np.ndarray]:
    """The GGUF row each HF row of a matrix comes from, found by running the processor on the row numbers; None
    where the processor renames it or changes values or shape (then it is no row permutation)."""
    rows = tensor.data.shape[0]
    probe = np.arange(rows, dtype=np.float64).reshape(rows, 1)
    result = _processed(plan, tensor, probe)
    order = np.asarray(result.weights)
    if result.name != tensor.name or order.shape != (rows, 1):
        return None
    order = order[:, 0]
    if not np.array_equal(np.sort(order), np.arange(rows)):
        return None
    return order.astype(np.int64)


def _dequantized(tensor, rows: Optional[np.ndarray] = None) -> np.ndarray:
    """gguf-py's fp32 values of one GGUF tensor (what transformers' loader computes), or of the given rows of a
    matrix (dequantization is row by row)."""
    from gguf import dequantize
    return dequantize(tensor.data if rows is None else tensor.data[rows], tensor.tensor_type)


def _bf16(values: np.ndarray):
    import torch

    from multidraft.models.gguf_weights import mapped_tensor     # F32 tensors are the file's read-only mapping
    return mapped_tensor(values).to(torch.bfloat16)


def _write_config(plan: _Plan, folder: Path) -> None:
    """config.json and generation_config.json as save_pretrained writes them for a bf16 model."""
    import torch
    from transformers import GenerationConfig

    plan.config.architectures = [type(plan.model).__name__]
    plan.config.dtype = torch.bfloat16
    plan.config.save_pretrained(str(folder))
    if plan.model.can_generate():
        GenerationConfig.from_model_config(plan.config).save_pretrained(str(folder))
