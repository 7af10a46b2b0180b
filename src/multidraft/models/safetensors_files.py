"""The safetensors files of an HF model folder, as save_pretrained writes them (one file, or shards and an index).

Its own module so that the quantized runner's folder reader and the Q8_0 writer (hf_q8_0.py) share one reader of the
index without importing each other."""
from __future__ import annotations

import json
from pathlib import Path

from multidraft.errors import CorruptCacheError, ModelNotFoundError

INDEX = "model.safetensors.index.json"


def indexed_files(folder: Path) -> dict[str, Path]:
    """Parameter name -> the safetensors file that holds it, from the folder's index (save_pretrained's shards)."""
    index = Path(folder) / INDEX
    try:
        return {name: Path(folder) / str(file)
                for name, file in json.loads(index.read_text())["weight_map"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise CorruptCacheError(f"cannot load {folder}: {INDEX} is not a safetensors index "
                                f"({type(error).__name__}); download or save the model folder again") from error


def weight_files(folder: Path) -> list[Path]:
    """The folder's safetensors files, as save_pretrained writes them: those its index names, else model.safetensors
    (where the loader reads the rest of the model)."""
    folder = Path(folder)
    if (folder / INDEX).is_file():
        files = sorted(set(indexed_files(folder).values()))
    else:
        files = [folder / "model.safetensors"]
    if not all(file.is_file() for file in files):
        raise ModelNotFoundError(f"{folder} holds no .safetensors weights, which the 8-bit runners quantize; save the "
                                 "model with save_pretrained(..., safe_serialization=True) or use runner='auto'")
    return files
