"""The on-disk n-gram file: one versioned file, memory-mapped on load.

Layout (little endian):
    b"MDNGRAM\\0"  u32 format version  u32 header length  header (UTF-8 JSON)  u32 crc32(header)
    zero padding to 64 bytes, then each array, each starting on a 64-byte boundary
    trailer: b"MDNGEND\\0" + sha256 of every byte between the header block and the trailer

The header names the tokenizer, vocab size, orders and corpus digest, and gives every array's
dtype, shape and byte offset. A missing trailer means a truncated file; a bad crc or sha256 means a
corrupt one. Both raise CorruptCacheError telling the user to rebuild.
"""

import hashlib
import json
import os
import struct
import zlib
from pathlib import Path

import numpy as np

from multidraft.errors import CorruptCacheError
from multidraft.fsutil import atomic_path

MAGIC = b"MDNGRAM\0"
END_MAGIC = b"MDNGEND\0"
FORMAT_VERSION = 1
ALIGN = 64
TRAILER_SIZE = len(END_MAGIC) + 32
_PREFIX = struct.Struct("<8sII")


def _pad(n: int) -> int:
    return (-n) % ALIGN


def _parts(value):
    """(dtype, [1-D parts]) for an array or a `(dtype, parts)` pair that is stored as their concatenation."""
    if isinstance(value, tuple):
        dtype, parts = value
        return np.dtype(dtype), list(parts)
    return np.dtype(value.dtype), [value]


def write(path, header: dict, arrays: dict) -> None:
    """Write `arrays` atomically to `path`. Values: arrays (memmaps welcome) or `(dtype, [parts])`.

    Arrays are copied in slices, so memory-mapped inputs never have to fit in RAM.
    """
    arrays = {name: _parts(value) for name, value in arrays.items()}
    header = dict(header)
    # Offsets are relative to the data start, so the header never depends on its own length.
    descr, offset = {}, 0
    for name, (dtype, parts) in arrays.items():
        array_dtype = dtype.newbyteorder("<")
        shape = list(parts[0].shape) if len(parts) == 1 else [sum(int(p.shape[0]) for p in parts)]
        nbytes = int(np.prod(shape)) * array_dtype.itemsize
        descr[name] = {"dtype": array_dtype.str, "shape": shape, "offset": offset}
        offset += nbytes + _pad(nbytes)
    header["arrays"] = descr
    header["data_size"] = offset
    blob = json.dumps(header, sort_keys=True).encode()
    start = _PREFIX.size + len(blob) + 4
    start += _pad(start)

    digest = hashlib.sha256()
    with atomic_path(path) as tmp, open(tmp, "wb") as out:
        out.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, len(blob)))
        out.write(blob)
        out.write(struct.pack("<I", zlib.crc32(blob)))
        out.write(b"\0" * (start - out.tell()))
        for name, (dtype, parts) in arrays.items():
            assert out.tell() == start + descr[name]["offset"]
            for part in parts:
                flat = part.reshape(-1)
                step = max(1, (16 << 20) // dtype.itemsize)
                for i in range(0, flat.shape[0], step):
                    chunk = np.ascontiguousarray(flat[i:i + step], dtype=descr[name]["dtype"]).tobytes()
                    digest.update(chunk)
                    out.write(chunk)
            pad = b"\0" * _pad(out.tell())
            digest.update(pad)
            out.write(pad)
        out.write(END_MAGIC + digest.digest())
        out.flush()
        os.fsync(out.fileno())


def _fail(path, what: str):
    raise CorruptCacheError(f"n-gram file {path} {what}; rebuild it with `multidraft ngram build ... --out {path}`")


def read_header(path) -> tuple[dict, int]:
    """Return (header, data start offset) after checking magic, version, header crc and file size."""
    path = Path(path)
    if not path.is_file():
        from multidraft.errors import DataNotFoundError

        if path.is_dir():
            raise DataNotFoundError(f"{path} is a folder, not an n-gram file; name the .ngram file in it")
        raise DataNotFoundError(f"no n-gram file at {path}; build one with `multidraft ngram build`")
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(_PREFIX.size)
        if len(prefix) < _PREFIX.size:
            _fail(path, f"is truncated ({size} bytes)")
        magic, version, header_len = _PREFIX.unpack(prefix)
        if magic != MAGIC:
            _fail(path, "is not a multidraft n-gram file (bad magic bytes)")
        if version != FORMAT_VERSION:
            _fail(path, f"has format version {version}; this multidraft reads version {FORMAT_VERSION}")
        if header_len > size:
            _fail(path, f"is truncated or corrupt (header length {header_len} > file size {size})")
        blob = handle.read(header_len)
        crc = handle.read(4)
    if len(blob) < header_len or len(crc) < 4:
        _fail(path, "is truncated inside its header")
    if struct.unpack("<I", crc)[0] != zlib.crc32(blob):
        _fail(path, "has a corrupt header (crc32 mismatch)")
    header = json.loads(blob)
    start = _PREFIX.size + header_len + 4
    start += _pad(start)
    expected = start + header["data_size"] + TRAILER_SIZE
    if size != expected:
        _fail(path, f"is truncated or has trailing bytes ({size} bytes, expected {expected})")
    return header, start


def verify_data(path, header: dict, data_start: int) -> None:
    """Recompute the sha256 of the data section and compare it with the trailer."""
    end = data_start + header["data_size"]
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        handle.seek(data_start)
        remaining = end - data_start
        while remaining > 0:
            chunk = handle.read(min(remaining, 16 << 20))
            if not chunk:
                _fail(path, "is truncated")
            digest.update(chunk)
            remaining -= len(chunk)
        trailer = handle.read(TRAILER_SIZE)
    if trailer[:len(END_MAGIC)] != END_MAGIC:
        _fail(path, "is truncated (no end marker)")
    if trailer[len(END_MAGIC):] != digest.digest():
        _fail(path, "is corrupt (sha256 of its arrays does not match)")


def read(path, verify: bool = True) -> tuple[dict, dict]:
    """Return (header, arrays) with every array memory-mapped read-only."""
    header, data_start = read_header(path)
    with open(path, "rb") as handle:
        handle.seek(data_start + header["data_size"])
        if handle.read(len(END_MAGIC)) != END_MAGIC:
            _fail(path, "is truncated or corrupt (no end marker)")
    if verify:
        verify_data(path, header, data_start)
    arrays = {}
    for name, d in header["arrays"].items():
        shape = tuple(d["shape"])
        if int(np.prod(shape)) == 0:
            arrays[name] = np.zeros(shape, dtype=d["dtype"])
        else:
            arrays[name] = np.memmap(path, dtype=d["dtype"], mode="r", offset=data_start + d["offset"], shape=shape)
    return header, arrays
