"""An HF folder's matrices as Q8_0 blocks, so that the CPU's 8-bit kernels (the quantized runners) serve HF models too.

Asked for by name (`load_model(folder, runner="native")`, or "quantized-q8" / "quantized"; runner "auto" keeps an HF
folder's own weights): each matrix of the folder's safetensors (2-D, floating point, its width a multiple of 32)
becomes Q8_0 blocks made by gguf-py's quantizer, the one llama.cpp's `convert_hf_to_gguf.py --outtype q8_0` calls
(per 32 values d = max|x| / 127, q = roundf(x * (1 / d)) in fp32, d stored as fp16): the blocks that converter writes,
rows in HF's order. Everything else (norms, biases) stays the folder's. The blocks go once into a GGUF file in the
cache (tensors under their HF names, general.architecture HF_NAMES), keyed by the safetensors files' sha256 (each
file hashed once per version of it), and load from there as any GGUF's do; a folder's earlier versions' files are
removed when it gets a new one.

Why: on a CPU an HF folder otherwise runs in fp32 (the 1.5B reads ~6 GB a token); Q8_0 reads 34 bytes per 32 values,
its linears are the 8-bit kernels' (llama.cpp's arithmetic), and the forward is batch-invariant, so every lossless
method is token-identical to this model's greedy.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from multidraft import paths
from multidraft.errors import OutputPathError
from multidraft.fsutil import atomic_path, remembered_sha256
from multidraft.models.gguf_weights import HF_NAMES
from multidraft.models.safetensors_files import weight_files

FORMAT = 1                 # bump when the file's contents change for the same weights: a new cache key
BLOCK = 32                 # values per Q8_0 block
USERS = "folders.json"     # beside an entry's file: the HF folders whose current weights it holds


def q8_0_gguf(folder: Path, progress: bool = True) -> Path:
    """The cached Q8_0 GGUF of the HF folder's matrices, written first if needed (the 1.5B's 1.8 G weights: 16 s)."""
    files = weight_files(folder)
    digests = [(file.name, remembered_sha256(file, paths.subdir("safetensors-digests"))) for file in files]
    key = hashlib.sha256(json.dumps({"format": FORMAT, "files": digests}).encode()).hexdigest()[:32]
    target = paths.subdir("q8_0") / key / "weights.gguf"
    if target.is_file() and _readable(target):
        _claim(target.parent, folder)
        return target
    if target.is_file():
        warnings.warn(f"multidraft: the cached Q8_0 blocks of {folder} ({target}) do not read as a GGUF file; "
                      "quantizing again", RuntimeWarning, stacklevel=3)
    try:
        with atomic_path(target) as partial:
            write_q8_0_gguf(files, partial, progress, f"quantize {Path(folder).name} to Q8_0")
    except (OSError, OutputPathError) as error:          # a full disk, a read-only cache: the caller falls back
        from multidraft.models.quantized import QuantizedUnsupported

        raise QuantizedUnsupported(f"its Q8_0 blocks could not be written to {target.parent} "
                                   f"({getattr(error, 'strerror', None) or error}); free space there or point "
                                   "MULTIDRAFT_HOME elsewhere") from error
    _claim(target.parent, folder)
    return target


def _claim(entry: Path, folder: Path) -> None:
    """Record that `folder` uses the cache entry `entry`, and remove the entries of its earlier weights that no other
    folder uses: a folder whose checkpoint changes (training, a new download) keeps one Q8_0 file, not one a version."""
    folder = str(Path(folder).resolve())
    for other in entry.parent.iterdir():
        users = _users(other)
        if other == entry and folder not in users:
            _write_users(other, users + [folder])
        elif other != entry and folder in users:
            users.remove(folder)
            if users:
                _write_users(other, users)
            else:
                shutil.rmtree(other, ignore_errors=True)     # a process reading it keeps its mapping (unlinked)


def cached_files(folder: Path) -> list[Path]:
    """The Q8_0 files made for `folder` (its current weights' once loaded; none before), without hashing them."""
    root, folder = paths.home() / "q8_0", str(Path(folder).resolve())
    entries = sorted(root.iterdir()) if root.is_dir() else []
    return [entry / "weights.gguf" for entry in entries
            if folder in _users(entry) and (entry / "weights.gguf").is_file()]


def _users(entry: Path) -> list[str]:
    try:
        users = json.loads((entry / USERS).read_text())
        return [str(user) for user in users] if isinstance(users, list) else []
    except (OSError, ValueError):
        return []


def _write_users(entry: Path, users: list[str]) -> None:
    try:
        with atomic_path(entry / USERS) as partial:
            partial.write_text(json.dumps(users))
    except (OSError, OutputPathError):
        pass                                   # a read-only cache only keeps old entries longer


def _readable(path: Path) -> bool:
    """Whether a cached file still reads as a whole GGUF (one damaged after it was written is made again)."""
    from multidraft.models.gguf_header import TensorReader

    try:
        TensorReader(str(path), "r")
    except Exception:                  # gguf-py's parser: ValueError, struct.error, IndexError ... on bad bytes
        return False
    return True


FLOATS = ("F64", "F32", "F16", "BF16")      # safetensors' floating-point dtypes that gguf-py's quantizer takes


def quantizes(shape, dtype: str) -> bool:
    """Whether a tensor (its shape, its safetensors dtype) becomes Q8_0 blocks: a floating-point matrix whose rows
    fill whole blocks."""
    return len(shape) == 2 and shape[1] % BLOCK == 0 and shape[0] > 0 and dtype in FLOATS


def write_q8_0_gguf(files: list[Path], out: Path, progress: bool = True, label: str = "quantize") -> None:
    """A GGUF at `out` with every quantizable matrix of `files` as Q8_0 (under its HF name), nothing else."""
    import gguf
    from safetensors import safe_open
    from tqdm.auto import tqdm

    qtype = gguf.GGMLQuantizationType.Q8_0
    block_bytes = gguf.GGML_QUANT_SIZES[qtype][1]
    matrices = {}                                           # file -> [(name, rows, width)], in file order
    for file in files:
        with safe_open(str(file), "pt") as handle:
            for name in handle.keys():
                tensor = handle.get_slice(name)
                shape = tuple(tensor.get_shape())
                if quantizes(shape, tensor.get_dtype()):
                    matrices.setdefault(file, []).append((name, shape[0], shape[1]))
    listed = [matrix for file_matrices in matrices.values() for matrix in file_matrices]
    writer = gguf.GGUFWriter(str(out), HF_NAMES)
    for name, rows, width in listed:
        writer.add_tensor_info(name, (rows, width // BLOCK * block_bytes), np.dtype(np.uint8),
                               rows * width // BLOCK * block_bytes, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    total = sum(rows * width for _, rows, width in listed)
    with tqdm(total=total, desc=label, unit="weight", unit_scale=True, disable=not progress, file=sys.stderr) as bar:
        for file, file_matrices in matrices.items():           # the tensors in the order their infos were written
            with safe_open(str(file), "pt") as handle:
                for name, rows, width in file_matrices:
                    writer.write_tensor_data(_quantized(handle.get_tensor(name).float().numpy(), qtype, block_bytes))
                    bar.update(rows * width)
    writer.close()


def _quantized(values: np.ndarray, qtype, block_bytes: int, chunk_rows: int = 512) -> np.ndarray:
    """gguf-py's Q8_0 blocks of a matrix, its rows in chunks on torch's threads (numpy's loops release the GIL; each
    block is quantized alone, so the bytes are the whole matrix's): an 8960 x 1536 matrix 1.6x faster on 2 cores."""
    import gguf
    import torch

    rows, width = values.shape
    out = np.empty((rows, width // BLOCK * block_bytes), dtype=np.uint8)

    def chunk(start: int) -> None:
        out[start:start + chunk_rows] = gguf.quants.quantize(values[start:start + chunk_rows], qtype)
    with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
        list(pool.map(chunk, range(0, rows, chunk_rows)))
    return out

