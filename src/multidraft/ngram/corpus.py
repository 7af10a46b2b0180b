"""Corpora as texts, and texts as token ids (batched through a fast HF tokenizer)."""

from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from multidraft.errors import DataNotFoundError, InvalidOptionError
from multidraft.tokenizer_identity import vocab_fingerprint as tokenizer_fingerprint  # noqa: F401  (the old name here)

TEXT_SUFFIXES = {".py", ".txt", ".rst", ".md", ".c", ".h", ".js", ".ts", ".json", ".jsonl", ".html", ".tex", ".rs",
                 ".go", ".java", ".cpp", ".hpp", ".sh", ".toml", ".yaml", ".yml", ".cfg", ".ini"}


def iter_corpus_texts(spec: str) -> Iterator[str]:
    """Documents of a corpus: a `multidraft data` name, a text file, or a folder of text files."""
    from multidraft.data.registry import DATASETS

    if spec in DATASETS:
        from multidraft.data import iter_documents

        yield from iter_documents(spec)
        return
    path = Path(spec).expanduser()
    if path.is_file():
        with open(path, "rb") as handle:
            if b"\0" in handle.read(8192):         # a text file has no NUL byte; counting a binary's bytes is noise
                raise InvalidOptionError(f"corpus {spec!r} is a binary file, not text: give a text file or folder")
        yield path.read_text(encoding="utf-8", errors="replace")
    elif path.is_dir():
        for file in sorted(path.rglob("*")):
            if file.is_file() and (file.suffix in TEXT_SUFFIXES or file.name.endswith(".rst.txt")):
                yield file.read_text(encoding="utf-8", errors="replace")
    else:
        raise DataNotFoundError(
            f"corpus {spec!r} is neither a data set name ({', '.join(DATASETS)}) nor an existing file or folder")


def tokenize_documents(texts: Iterable[str], tokenizer, batch_size: int = 64) -> Iterator[np.ndarray]:
    """Token ids of each text (no special tokens), encoded in batches so a fast tokenizer can go parallel."""
    batch = []
    for text in texts:
        batch.append(text)
        if len(batch) == batch_size:
            yield from _encode(tokenizer, batch)
            batch = []
    if batch:
        yield from _encode(tokenizer, batch)


def _encode(tokenizer, batch):
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    if backend is not None and hasattr(backend, "encode_batch"):
        # The Rust tokenizer directly: skips the Python-side BatchEncoding overhead.
        for enc in backend.encode_batch(batch, add_special_tokens=False):
            yield np.asarray(enc.ids, dtype=np.uint32)
    else:
        for ids in tokenizer(batch, add_special_tokens=False)["input_ids"]:
            yield np.asarray(ids, dtype=np.uint32)


def load_tokenizer(name_or_path):
    """The tokenizer of a model alias or a local tokenizer folder (through multidraft.models.loader)."""
    path = Path(str(name_or_path)).expanduser()
    if path.is_dir() and (path / "tokenizer.json").exists() and not (path / "config.json").exists():
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    from multidraft.models.loader import load_tokenizer as _load

    return _load(name_or_path)
