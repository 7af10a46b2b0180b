"""Find a model by alias or path and load it with transformers, offline.

`name_or_path` may be:
* a registry alias (`smollm2-135m`, ...) that was pulled with `multidraft models pull` (its GGUF and the quantized
  runner's part of its conversion; the whole bf16 HF folder is converted where HF weights are needed);
* a local HF folder (a folder with config.json);
* a .gguf file (converted once under the cache's from-gguf/, keyed by the file's sha256: only what the quantized
  runner reads for it, in seconds; the whole bf16 HF folder where HF weights are needed);
* an HF id (`org/name`) whose snapshot is already in the local HF cache.
Nothing here touches the network: the HF libraries run with HF_HUB_OFFLINE=1 and local_files_only=True.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from multidraft import paths
from multidraft.errors import CorruptCacheError, InvalidOptionError, ModelNotFoundError, MultidraftError
from multidraft.fsutil import remembered_sha256
from multidraft.models import integrity, model_store, registry
from multidraft.models.device import configure_cuda, parse_device
from multidraft.models.gguf_to_hf import is_reference
from multidraft.models.offline import offline_env
from multidraft.models.pulling import (check_gguf_file, convert_gguf,  # noqa: F401  (pull: this module's API)
                                       pull, runner_part_or_whole, transformers_reading)
from multidraft.models.registry import ModelSpec
from multidraft.tokenizer_identity import vocab_fingerprint

_HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


@dataclass(frozen=True)
class ResolvedModel:
    """Where a model is. `kind` is "alias", "hf_folder", "gguf" or "hf_id"; `path` is a folder or a .gguf file."""

    name: str
    kind: str
    path: Path
    spec: Optional[ModelSpec] = None

    @property
    def is_hf(self) -> bool:
        """An HF model (a folder or a cached id), no GGUF behind it."""
        return self.kind in ("hf_folder", "hf_id")


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is. Models with equal `vocab_family` share token ids (drafts can be verified)."""

    name: str
    path: Path
    vocab_family: str
    vocab_size: int
    context_length: Optional[int]
    is_chat: bool
    architecture: str
    dtype: str
    device: str


def resolve(name_or_path: Union[str, os.PathLike]) -> ResolvedModel:
    """Locate a model without loading it. Unknown names raise ModelNotFoundError listing the aliases."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise InvalidOptionError(f"a model is named by an alias, a path or an HF id (a string), not "
                                 f"{type(name_or_path).__name__}; known aliases: {', '.join(registry.aliases())}")
    name = os.fspath(name_or_path)
    if not isinstance(name, str):
        name = os.fsdecode(name)
    if "\x00" in name or _has_surrogate(name):
        raise ModelNotFoundError(f"no model named {name!r}: the name holds a NUL or invalid UTF-8")
    if not name.strip():
        raise ModelNotFoundError(_unknown_message(name))
    if registry.is_alias(name):
        return ResolvedModel(name, "alias", model_store.require_alias(name), registry.get_spec(name))
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFoundError(f"{path} is a folder but not an HF model folder (it has no config.json)")
        return ResolvedModel(name, "hf_folder", path.resolve())
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelNotFoundError(f"{path} is a file but not a .gguf model; give a .gguf file or an HF folder")
        check_gguf_file(path)
        return ResolvedModel(name, "gguf", path.resolve())
    snapshot = _hf_cache_snapshot(name) if _HF_ID.match(name) else None
    if snapshot is not None:
        return ResolvedModel(name, "hf_id", snapshot)
    raise ModelNotFoundError(_unknown_message(name))


def _has_surrogate(text: str) -> bool:
    return any("\ud800" <= ch <= "\udfff" for ch in text)


def _unknown_message(name: str) -> str:
    return (
        f"no model named {name!r}: not a known alias, an existing path, or an HF id in the local HF cache. "
        f"Known aliases: {', '.join(registry.aliases())} (pull one with `multidraft models pull NAME`)"
    )


def _hf_cache_snapshot(repo_id: str) -> Optional[Path]:
    """The local snapshot folder of `repo_id` if the HF cache holds a config.json for it; never downloads."""
    try:
        from huggingface_hub import snapshot_download

        with offline_env():
            folder = Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # not cached, invalid id, hub library quirks: all mean "not available offline"
        return None
    return folder if (folder / "config.json").is_file() else None


def hf_folder(resolved: ResolvedModel, progress: bool = True) -> Path:
    """An HF folder for a resolved model. A GGUF file, and an alias pulled as the quantized runner's part of its
    conversion, are converted whole once and cached (30 s to minutes the first time)."""
    if resolved.kind == "alias" and is_reference(resolved.path):
        return _converted(resolved.path / model_store.SOURCE_GGUF, resolved.spec.gguf_sha256, progress)
    if resolved.kind != "gguf":
        return resolved.path
    return _converted(resolved.path, gguf_digest(resolved.path), progress)


def gguf_digest(path: Path) -> str:
    """A local GGUF's sha256 (its conversions' cache key), hashed once per version of the file."""
    return remembered_sha256(path, paths.subdir("gguf-digests"))


def runner_folder(resolved: ResolvedModel, progress: bool = True) -> Path:
    """The folder the quantized runner reads (config, tokenizer, norms, rows to check its blocks against): the
    model's folder, or for a GGUF file not converted whole yet only that part of its conversion (seconds, a few MB;
    models/gguf_to_hf.py); the whole HF folder where that part cannot be written alone."""
    if resolved.kind != "gguf":
        return resolved.path
    digest = gguf_digest(resolved.path)
    if model_store.check_entry(model_store.gguf_entry_dir(digest), digest).ok:
        return model_store.gguf_entry_dir(digest)
    return runner_part_or_whole(lambda reference: _converted(resolved.path, digest, progress, reference))


def _converted(gguf: Path, digest: str, progress: bool, reference: bool = False) -> Path:
    """The cache folder of `gguf`'s conversion (whole, or reference: the quantized runner's part), made if needed."""
    folder = model_store.gguf_entry_dir(digest, reference)
    if not model_store.check_entry(folder, digest).ok:
        model_store.sweep_partials(folder.parent, folder.name)
        details = {"source": {"gguf_path": str(gguf), "gguf_size": gguf.stat().st_size}}
        convert_gguf(gguf, folder, digest, progress=progress, details=details, reference_only=reference)
    return folder


def quantized_source(resolved: ResolvedModel, progress: bool = True) -> Path:
    """The GGUF file a quantized runner reads: a GGUF-backed model's own, an HF model's matrices as Q8_0 blocks
    (models/hf_q8_0.py: made once, cached; only where a quantized runner was asked for by name)."""
    if not resolved.is_hf:
        return gguf_source(resolved.name)
    from multidraft.models import hf_q8_0
    from multidraft.models.quantized import require_kernels

    require_kernels(progress)               # no Q8_0 file for kernels that cannot run here
    return hf_q8_0.q8_0_gguf(resolved.path, progress)


def gguf_source(name_or_path) -> Path:
    """The GGUF file a model's weights came from: a pulled alias keeps it in its folder, a .gguf path is itself.
    Raises ModelNotFoundError (saying what to do) for HF folders and ids, and for aliases pulled before the GGUF
    was kept."""
    resolved = resolve(name_or_path)
    if resolved.kind == "gguf":
        return resolved.path
    if resolved.kind == "alias":
        path = resolved.path / model_store.SOURCE_GGUF
        if path.is_file():
            return path
        raise ModelNotFoundError(f"the cached {resolved.name} predates kept GGUF files; run "
                                 f"`multidraft models pull {resolved.name} --force` to keep its GGUF")
    raise ModelNotFoundError(f"{resolved.name} is an HF model, not a GGUF one; give a .gguf file or a registry alias")


# ---------------------------------------------------------------- dtype and device


_DTYPE_NAMES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp32": "float32", "float32": "float32",
                "float": "float32", "fp16": "float16", "float16": "float16", "half": "float16"}


def cpu_supports_bf16() -> bool:
    """True when the CPU has native bf16 arithmetic (AVX512-BF16 or AMX-BF16); otherwise bf16 is emulated and slow."""
    try:
        with open("/proc/cpuinfo") as handle:
            flags = set()
            for line in handle:
                if line.startswith("flags"):
                    flags.update(line.split(":", 1)[1].split())
                    break
        return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except Exception:
        return False


def default_device() -> str:
    return parse_device(None)


def default_dtype(device: str) -> "torch.dtype":  # noqa: F821
    """fp32 on the CPU: bf16 rounds differently in a 1-token forward and an 8-token verify, so on bf16 weights the
    lossless methods drift from greedy at near-ties (issue 29); bf16 stays one `dtype="bf16"` away. CUDA: bf16."""
    import torch

    if str(device).startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def hf_native_dtype(device: str) -> "torch.dtype":  # noqa: F821
    """What an HF user gets on this hardware (bf16 where the CPU computes it natively): the HF peers' dtype."""
    import torch

    if str(device).startswith("cpu") and cpu_supports_bf16():
        return torch.bfloat16
    return default_dtype(device)


def parse_dtype(dtype, device: str) -> "torch.dtype":  # noqa: F821
    import torch

    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        if not dtype.is_floating_point:      # else transformers' refusal, reported as a damaged model folder
            raise InvalidOptionError(f"dtype {dtype} is not a floating-point type; use bf16, fp16 or fp32")
        return dtype
    name = _DTYPE_NAMES.get(str(dtype).lower().removeprefix("torch."))
    if name is None:
        raise InvalidOptionError(f"unknown dtype {dtype!r}; use one of bf16, fp16, fp32 (or None for automatic)")
    return getattr(torch, name)


# ---------------------------------------------------------------- loading


def load_tokenizer(name_or_path):
    """The model's tokenizer only (no weights); a GGUF file that is not converted yet is not converted."""
    from transformers import AutoTokenizer

    resolved = resolve(name_or_path)
    folder = resolved.path
    with offline_env(), _read_errors(resolved, folder, tokenizer=True):
        if resolved.kind == "gguf":
            digest = gguf_digest(resolved.path)
            converted = [model_store.gguf_entry_dir(digest, reference) for reference in (False, True)]
            converted = [folder for folder in converted if model_store.check_entry(folder, digest).ok]
            if not converted:                # not converted yet: read the GGUF's own tokenizer
                with transformers_reading(resolved.path) as gguf:
                    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
            folder = converted[0]
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def load_model(name_or_path, dtype=None, device=None, runner: str = "auto", **kwargs) -> "LM":  # noqa: F821
    """The model wrapped in the `LM` runner. runner: "auto" (the default choice below), "quantized-q8" (a GGUF's
    blocks with llama.cpp's 8-bit activations), "quantized" (the same blocks with fp32 activations: the reference,
    opt-in), "eager", "fast" or "static" (see `LM.use_runner`).

    On the CPU, a model with a GGUF behind it (a pulled alias, a .gguf file) runs by default on the quantized-q8
    runner: the GGUF's own blocks, integer dot products as llama.cpp computes them, batch-invariant forwards with
    the same bits on every instruction set (models/quantized.py, kernels/q8_linear.inc), so every lossless method
    is token-identical to greedy on any x86-64 CPU. A dtype other than fp32, a non-default attention
    implementation, or a runner other than "auto" and the quantized ones loads the HF folder instead. An HF model
    (a folder or a cached id) named with a quantized runner runs on its matrices as Q8_0 blocks (models/hf_q8_0.py:
    what llama.cpp's converter makes with --outtype q8_0; quantized once and cached); "auto" keeps its own weights."""
    from multidraft.heap import collection_paused, return_freed_memory

    with collection_paused():                  # a full collection per step of the heap's growth: ~20% of a load
        lm = _load_model(name_or_path, dtype, device, runner, kwargs)
    return_freed_memory()
    return lm


def _load_model(name_or_path, dtype, device, runner: str, kwargs) -> "LM":  # noqa: F821
    from transformers.utils import logging as hf_logging

    from multidraft.models.runner import LM    # here, not at the top: `multidraft.models` stays light to import
    _check_load_arguments(kwargs)
    hf_logging.disable_progress_bar()          # our own progress bars cover the long steps (pull, convert)
    if _wants_quantized(name_or_path, dtype, device, runner, kwargs):
        loaded = _load_quantized(name_or_path, runner, device, kwargs.get("progress", True))
        if loaded is not None:
            model, tokenizer, info = loaded
            return LM(model, tokenizer, name=info.name, info=info, runner=None if runner == "auto" else runner)
        runner = "auto"
    model, tokenizer, info = load_hf_model(name_or_path, dtype=dtype, device=device, **kwargs)
    return LM(model, tokenizer, name=getattr(info, "name", str(name_or_path)), info=info, runner=runner)


def _check_load_arguments(kwargs) -> None:
    """load_model's keywords beyond dtype, device and runner (else load_hf_model's TypeError, after the lookup)."""
    from multidraft.validation import did_you_mean

    known = ("dtype", "device", "runner", "attn_implementation", "progress")
    for name in kwargs:
        if name not in known:
            hint = "; set threads with torch.set_num_threads(N)" if "thread" in name else ""
            raise InvalidOptionError(f"load_model() has no argument {name!r}{did_you_mean(name, known)}; it takes "
                                     f"{', '.join(known)}{hint}")


def _wants_quantized(name_or_path, dtype, device, runner: str, kwargs) -> bool:
    """The quantized runner serves a GGUF-backed model on the CPU when asked ("quantized") or by default ("auto"
    with no dtype other than fp32 and HF's default attention). Any other choice keeps the HF folder's weights."""
    from multidraft.models.runners import REGISTRY    # here: importing it loads torch

    if getattr(REGISTRY.get(runner), "quantized", False):      # quantized, quantized-q8, native
        return True
    if runner != "auto" or kwargs.get("attn_implementation", "sdpa") != "sdpa":
        return False
    if not str(parse_device(device)).startswith("cpu"):
        return False
    if dtype not in (None, "auto") and str(parse_dtype(dtype, "cpu")) != "torch.float32":
        return False
    try:
        gguf_source(name_or_path)
    except MultidraftError:
        return False
    return True


def _load_quantized(name_or_path, runner: str, device, progress: bool):
    """(model, tokenizer, info) on GGUF blocks, or None with one warning where that cannot be done here."""
    import warnings

    import torch
    from transformers import AutoTokenizer

    from multidraft.models.quantized import QuantizedUnsupported, load_quantized_model

    resolved = resolve(name_or_path)
    try:
        # A quantized runner asked for by name runs on the CPU where no device is given, a GPU machine included
        # (None means "cuda if torch sees one" elsewhere); a GPU asked for by name gets the HF folder's weights.
        if device is not None and not str(parse_device(device)).startswith("cpu"):
            raise QuantizedUnsupported(f"it runs on the CPU only, not {parse_device(device)}")
        source = quantized_source(resolved, progress)
        folder = runner_folder(resolved, progress)
        with offline_env(), _read_errors(resolved, folder, tokenizer=True):
            tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        model = load_quantized_model(folder, source, activations="fp32" if runner == "quantized" else "auto")
    except (QuantizedUnsupported, ModelNotFoundError) as why:
        if runner != "auto" or getattr(why, "machine", False):
            warnings.warn(f"multidraft: the quantized runner cannot serve {resolved.name}: {why}; using the HF "
                          "folder's weights instead", RuntimeWarning, stacklevel=3)
        return None
    info = _model_info(resolved, folder, model, tokenizer, torch.float32, "cpu")
    return model, tokenizer, info


def load_hf_model(name_or_path, dtype=None, device=None, attn_implementation: str = "sdpa", progress: bool = True):
    """Load (hf_model, tokenizer, info). dtype None: fp32 on the CPU, bf16 on CUDA (fp16 without bf16);
    device None: cuda if available, else cpu. The model is in eval mode."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    resolved = resolve(name_or_path)
    device = parse_device(device)
    torch_dtype = parse_dtype(dtype, device)
    folder = hf_folder(resolved, progress)
    if resolved.kind != "alias":           # aliases and GGUF conversions were checked against their manifest
        problem = integrity.folder_problem(folder)
        if problem:
            raise CorruptCacheError(f"cannot load {resolved.name}: {problem} in {folder}; {_repair(resolved)}")
    with offline_env(), _read_errors(resolved, folder, tokenizer=True):
        tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    with offline_env(), _read_errors(resolved, folder):
        model = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch_dtype, attn_implementation=attn_implementation, local_files_only=True
        )
    model.to(device)
    model.eval()
    configure_cuda(device)             # attention kernel choice on CUDA (models/device.py)
    info = _model_info(resolved, folder, model, tokenizer, torch_dtype, device)
    return model, tokenizer, info


def _repair(resolved: ResolvedModel, folder: Optional[Path] = None) -> str:
    if folder is not None and folder.parent == model_store.models_root() / "from-gguf":    # a conversion cached
        return f"delete {folder} and load the model again to reconvert it"
    if resolved.kind == "alias":
        return model_store.repair_hint(resolved.name)
    if resolved.kind == "gguf":
        folder = model_store.gguf_entry_dir(gguf_digest(resolved.path))
        return f"delete {folder} and load the GGUF file again to reconvert it"
    return "download or save the model folder again"


@contextlib.contextmanager
def _read_errors(resolved: ResolvedModel, folder: Path, tokenizer: bool = False):
    """A model folder that passes the cheap checks can still hold files transformers cannot use (a config
    without the fields the architecture needs, a tokenizer.json of the wrong shape): say which model and how
    to repair it, in one line, instead of a traceback from transformers. The tokenizers library reports a
    malformed tokenizer.json as a bare Exception, so around the tokenizer load every Exception is caught."""
    try:
        from safetensors import SafetensorError
    except ImportError:                    # older safetensors: its errors are OSError / ValueError
        SafetensorError = OSError
    caught = (Exception,) if tokenizer else (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError,
                                             SafetensorError)
    try:
        yield
    except MultidraftError:
        raise
    except caught as exc:
        detail = " ".join(str(exc).split())[:300]
        if "attn_implementation" in detail:     # the caller's argument, not a damaged folder
            raise InvalidOptionError(f"attn_implementation: {detail}") from None
        raise CorruptCacheError(f"cannot load {resolved.name} from {folder} ({type(exc).__name__}: {detail}); "
                                f"{_repair(resolved, folder)}") from exc


def _model_info(resolved: ResolvedModel, folder: Path, model, tokenizer, dtype, device: str) -> ModelInfo:
    config = model.config
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    spec = resolved.spec
    return ModelInfo(
        name=resolved.name,
        path=folder,
        vocab_family=spec.vocab_family if spec else vocab_fingerprint(tokenizer),
        vocab_size=len(tokenizer),
        context_length=getattr(text_config, "max_position_embeddings", None),
        is_chat=spec.is_chat if spec else bool(getattr(tokenizer, "chat_template", None)),
        architecture=spec.architecture if spec else str(config.model_type),
        dtype=str(dtype).removeprefix("torch."),
        device=str(device),
    )
