"""A GGUF file written as HF files one tensor at a time: the whole bf16 folder, or only what the quantized runner reads.

transformers' `from_pretrained(gguf_file=...)` dequantizes every tensor and holds the whole model before
`save_pretrained` writes it: the 1.5B's conversion peaked at 5.7 GB of RSS, a 7B's would need ~25 GB. Here each
tensor is dequantized (gguf-py, in row chunks), put through transformers' own processor for its architecture
(Llama's q/k row order, Gemma's norm offset), cast to bf16 and added to a shard of at most `SHARD_BYTES`, so memory
holds one shard and one tensor.

`write_weights`: the folder `save_pretrained` writes (the same tensors bit for bit, the same config.json and
generation_config.json; tests/test_gguf_to_hf.py compares them with transformers' own conversion).
`write_reference`: what the quantized runner reads from an HF folder (models/quantized.py) and nothing else: the
config, every tensor that stays dense (norms, biases) and a few rows of each matrix the runner takes from the GGUF
(`reference_rows`), which it checks its own blocks against. Those rows are dequantized alone: the processor is run
on the row numbers to learn which GGUF row becomes each HF row. Seconds for any size of model, and a few MB.

Only architectures whose conversion is per tensor stream: transformers' legacy GGUF loader with the plain, Llama
or Gemma processor. Others (mixture-of-experts processors gather experts across tensors; transformers' newer GGUF
path) and GGUFs that leave a weight of the model unset get None: the caller converts the whole model as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

REFERENCE_FILE = "reference.safetensors"   # write_reference's tensors: not an HF checkpoint (from_pretrained refuses)
SHARD_BYTES = 1 << 30              # bf16 bytes per shard: memory holds one shard while it fills
CHUNK_VALUES = 1 << 24             # values dequantized at a time (gguf-py's intermediates are several times this)
_PER_TENSOR = ("TensorProcessor", "LlamaTensorProcessor", "Gemma2TensorProcessor")


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


def write_weights(gguf: Path, folder: Path):
    """Write `gguf`'s weights (bf16 safetensors) and config into `folder`; returns the HF config, or None (nothing
    written) where the conversion is not per tensor."""
    plan = _plan(Path(gguf))
    if plan is None:
        return None
    with _Shards(folder) as shards:
        for tensor in plan.tensors:
            name, values = _converted(plan, tensor, _dequantized(tensor))
            shards.add(name, _bf16(values))
    _write_config(plan, folder)
    return plan.config


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


def _converted(plan: _Plan, tensor, values: np.ndarray) -> tuple[str, np.ndarray]:
    """(HF name, HF values) of one GGUF tensor: transformers' processor on its fp32 values."""
    result = plan.processor.process(weights=values, name=tensor.name, tensor_key_mapping=plan.hf_names,
                                    parsed_parameters=plan.parsed)
    return plan.hf_names[result.name], result.weights


def _row_order(plan: _Plan, tensor) -> Optional[np.ndarray]:
    """The GGUF row each HF row of a matrix comes from, found by running the processor on the row numbers; None
    where the processor renames it or changes values or shape (then it is no row permutation)."""
    rows = tensor.data.shape[0]
    probe = np.arange(rows, dtype=np.float64).reshape(rows, 1)
    result = plan.processor.process(weights=probe, name=tensor.name, tensor_key_mapping=plan.hf_names,
                                    parsed_parameters=plan.parsed)
    order = np.asarray(result.weights)
    if result.name != tensor.name or order.shape != (rows, 1):
        return None
    order = order[:, 0]
    if not np.array_equal(np.sort(order), np.arange(rows)):
        return None
    return order.astype(np.int64)


def _dequantized(tensor, rows: Optional[np.ndarray] = None) -> np.ndarray:
    """gguf-py's fp32 values of one GGUF tensor (what transformers' loader computes), or of the given rows of a
    matrix; dequantized in row chunks so that gguf-py's intermediates stay small."""
    from gguf import dequantize

    data = tensor.data if rows is None else tensor.data[rows]
    if data.ndim < 2 or int(tensor.n_elements) <= CHUNK_VALUES:
        return dequantize(data, tensor.tensor_type)
    step = max(1, CHUNK_VALUES * tensor.data.shape[0] // int(tensor.n_elements))
    first = dequantize(data[:step], tensor.tensor_type)
    values = np.empty((data.shape[0],) + first.shape[1:], dtype=first.dtype)
    values[:step] = first
    for start in range(step, data.shape[0], step):
        values[start:start + step] = dequantize(data[start:start + step], tensor.tensor_type)
    return values


def _bf16(values: np.ndarray):
    import torch
    if not (values.flags.writeable and values.flags.c_contiguous):     # F32 tensors: the file's own mapping
        values = np.array(values)
    return torch.from_numpy(values).to(torch.bfloat16)


def _write_config(plan: _Plan, folder: Path) -> None:
    """config.json and generation_config.json as save_pretrained writes them for a bf16 model."""
    import torch
    from transformers import GenerationConfig

    plan.config.architectures = [type(plan.model).__name__]
    plan.config.dtype = torch.bfloat16
    plan.config.save_pretrained(str(folder))
    if plan.model.can_generate():
        GenerationConfig.from_model_config(plan.config).save_pretrained(str(folder))


class _Shards:
    """Tensors written as safetensors shards of at most SHARD_BYTES each, named and indexed as save_pretrained
    names them (one file: model.safetensors; more: model-0000i-of-0000n.safetensors and an index)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.pending: dict = {}
        self.pending_bytes = 0
        self.written: list[tuple[Path, list[str]]] = []
        self.total_bytes = 0

    def __enter__(self):
        return self

    def add(self, name: str, tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        if self.pending and self.pending_bytes + size > SHARD_BYTES:
            self._flush()
        self.pending[name] = tensor
        self.pending_bytes += size
        self.total_bytes += size

    def _flush(self) -> None:
        from safetensors.torch import save_file

        path = self.folder / f".shard-{len(self.written)}.safetensors"
        save_file(self.pending, str(path), metadata={"format": "pt"})
        self.written.append((path, list(self.pending)))
        self.pending, self.pending_bytes = {}, 0

    def __exit__(self, kind, error, trace):
        if kind is not None:               # the caller's temporary folder goes as a whole
            return False
        if self.pending or not self.written:
            self._flush()
        count = len(self.written)
        if count == 1:
            self.written[0][0].rename(self.folder / "model.safetensors")
            return False
        weight_map = {}
        for number, (path, names) in enumerate(self.written, start=1):
            final = f"model-{number:05d}-of-{count:05d}.safetensors"
            path.rename(self.folder / final)
            weight_map.update(dict.fromkeys(names, final))
        index = {"metadata": {"total_size": self.total_bytes}, "weight_map": dict(sorted(weight_map.items()))}
        (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        return False
