"""Cheap checks that a model folder's files can be read, run before every load.

A damaged file should give one clear line naming the file and the repair, not a traceback from deep inside
transformers or safetensors. These checks read only headers and the small JSON files:
- every *.safetensors file: the 8-byte header length, the JSON header, and every tensor's byte range inside
  the file with the size its dtype and shape imply;
- config.json, generation_config.json, tokenizer_config.json: valid JSON objects; tokenizer.json (megabytes):
  its first and last bytes (it is parsed in full by the tokenizer load right after).
They do not read the weights themselves: bytes overwritten inside a tensor are found by the sha256 check
(`multidraft models verify`, or at load when a file's modification time differs from the one recorded).
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Optional

JSON_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "model.safetensors.index.json")
_PARSE_LIMIT = 1 << 20                    # JSON files up to 1 MiB are parsed in full
_MAX_HEADER = 100 * 1024 * 1024           # the safetensors format's own limit on the header size
_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
                "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


def safetensors_problem(path: Path) -> Optional[str]:
    """None when the file's header parses and every tensor lies inside the file, else what is wrong."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                return f"{path.name} is too short to be a safetensors file"
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > min(_MAX_HEADER, size - 8):
                return f"{path.name} has a damaged safetensors header (length {header_len} for a {size}-byte file)"
            header = json.loads(handle.read(header_len).decode("utf-8"))
    except OSError as exc:
        return f"{path.name} cannot be read ({exc.strerror or exc})"
    except (UnicodeDecodeError, ValueError):
        return f"{path.name} has a damaged safetensors header (not valid JSON)"
    if not isinstance(header, dict):
        return f"{path.name} has a damaged safetensors header (not a JSON object)"
    data_size = size - 8 - header_len
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(x) for x in entry["data_offsets"])
            expected = math.prod(int(d) for d in entry["shape"]) * _DTYPE_BYTES[entry["dtype"]]
        except (KeyError, TypeError, ValueError):
            return f"{path.name} has a damaged safetensors header (entry {name[:60]!r})"
        if not 0 <= begin <= end <= data_size or end - begin != expected:
            return f"{path.name} has a damaged safetensors header (tensor {name[:60]!r} lies outside the file)"
    return None


def json_problem(path: Path, parse_limit: Optional[int] = None) -> Optional[str]:
    """None when `path` is a JSON object, else what is wrong. Files over `parse_limit` bytes (tokenizer.json:
    3.5 MB for SmolLM2, 11 MB and ~2 s to parse for Qwen2.5 on a busy 2-core machine) are only checked to
    start with '{' and end with '}': the tokenizer load that follows parses them anyway, and its failure is
    reported in one line too (loader._read_errors)."""
    path = Path(path)
    parse_limit = _PARSE_LIMIT if parse_limit is None else parse_limit
    try:
        size = path.stat().st_size
        if size > parse_limit:
            with open(path, "rb") as handle:
                head = handle.read(64).lstrip()
                handle.seek(max(0, size - 64))
                tail = handle.read().rstrip()
            if not head.startswith(b"{") or not tail.endswith(b"}"):
                return f"{path.name} is not valid JSON"
            return None
        value = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        return f"{path.name} cannot be read ({exc.strerror or exc})"
    except (UnicodeDecodeError, ValueError):
        return f"{path.name} is not valid JSON"
    if not isinstance(value, dict):
        return f"{path.name} is not a JSON object"
    return None


def folder_problem(folder: Path) -> Optional[str]:
    """The first unreadable file of a model folder, described, or None when every cheap check passes."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        return f"{folder} has no config.json"
    for name in JSON_FILES:
        if (folder / name).is_file():
            problem = json_problem(folder / name)
            if problem:
                return problem
    for path in sorted(folder.glob("*.safetensors")):
        problem = safetensors_problem(path)
        if problem:
            return problem
    return None
