"""Count n-grams of a token stream in bounded memory and write them as one n-gram file.

Representation (a forward trie flattened into one sorted array): level 1 is dense, key = token,
and level m >= 2 holds every distinct m-gram as the key `(parent + 1) * V + token`, where `parent`
is the global index (position in the key array) of its first m-1 tokens. Because parents of level m
all lie in level m-1, the levels come out sorted one after the other, an n-gram's id is simply its
position, and the children of one context are contiguous. Keys are exact for any vocabulary (no
hashing, no 64-bit overflow from packing five 18-bit tokens).

Building goes level by level over a token file on disk:
  pass A: per chunk, unique keys + counts (numpy sort); runs are merged when they grow too big;
  pass B: map each position to the global index of the m-gram ending there (input of level m+1).
Memory stays at about one chunk plus the distinct m-grams of the current level, whatever the
corpus size; the token stream and per-position indices live in temporary files.
"""

import hashlib
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import numpy as np

from multidraft.errors import InvalidOptionError
from multidraft.ngram import fileformat

SENTINEL = np.uint32(0xFFFFFFFF)  # document boundary in the token file; also "no m-gram here" in id files


@dataclass
class BuildStats:
    num_tokens: int = 0
    num_documents: int = 0
    level_sizes: dict = field(default_factory=dict)  # order -> distinct n-grams
    seconds_spool: float = 0.0
    seconds_count: float = 0.0


def _noop_progress(n):
    pass


def spool_tokens(token_docs: Iterable, path: Path, vocab_size: int, progress=_noop_progress):
    """Write documents as one uint32 stream with a SENTINEL after each. Returns (tokens, docs, sha256)."""
    digest = hashlib.sha256()
    num_tokens = num_docs = 0
    with open(path, "wb") as out:
        for doc in token_docs:
            arr = np.asarray(doc, dtype=np.int64)
            if arr.size:
                if arr.min() < 0 or arr.max() >= vocab_size:
                    raise InvalidOptionError(
                        f"token id {int(arr.max() if arr.max() >= vocab_size else arr.min())} is outside the "
                        f"vocabulary of size {vocab_size}")
            buf = np.empty(arr.size + 1, dtype=np.uint32)
            buf[:-1] = arr
            buf[-1] = SENTINEL
            data = buf.tobytes()
            digest.update(data)
            out.write(data)
            num_tokens += int(arr.size)
            num_docs += 1
            progress(int(arr.size))
    return num_tokens, num_docs, digest.hexdigest()


def _merge_runs(runs):
    """Merge sorted (keys, counts) runs into one sorted run with summed counts."""
    if len(runs) == 1:
        return runs[0]
    keys = np.concatenate([r[0] for r in runs])
    counts = np.concatenate([r[1] for r in runs])
    order = np.argsort(keys, kind="stable")  # timsort: merges the sorted runs in O(n log runs)
    keys, counts = keys[order], counts[order]
    if keys.size == 0:  # every run empty (e.g. a corpus of empty documents)
        return keys, counts
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
    return keys[starts], np.add.reduceat(counts, starts)


def _level_keys(tokens, prev_ids, a, b, parent_base, vocab_size):
    """Keys of the m-grams ending at positions a..b-1 (mask of valid positions, keys)."""
    prev = prev_ids[a - 1:b - 1]
    tok = tokens[a:b]
    valid = (prev != SENTINEL) & (tok != SENTINEL)
    keys = prev[valid].astype(np.uint64)
    keys += np.uint64(parent_base + 1)  # local parent id -> global id, + 1
    keys *= np.uint64(vocab_size)
    keys += tok[valid]
    return valid, keys


def count_level(order, tokens, prev_ids, vocab_size, parent_base, workdir: Path, need_ids: bool,
                chunk_tokens=1 << 22, merge_limit=1 << 24, progress=_noop_progress):
    """Distinct `order`-grams (sorted keys, counts) and, if `need_ids`, a memmap of per-position local ids.

    `parent_base` is the global index of the first entry of level order-1."""
    n = tokens.shape[0]
    runs, run_len, chunks = [], 0, []
    for ci, a in enumerate(range(1, n, chunk_tokens)):
        b = min(n, a + chunk_tokens)
        valid, keys = _level_keys(tokens, prev_ids, a, b, parent_base, vocab_size)
        if need_ids:
            uniq, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
            np.save(workdir / f"inv{ci}.npy", inverse.astype(np.uint32))
            np.save(workdir / f"uniq{ci}.npy", uniq)
            chunks.append((a, b, ci))
        else:
            uniq, counts = np.unique(keys, return_counts=True)
        runs.append((uniq, counts.astype(np.uint64)))
        run_len += uniq.size
        if run_len > merge_limit and len(runs) > 1:
            runs = [_merge_runs(runs)]
            run_len = runs[0][0].size
        progress(b - a)
    keys, counts = _merge_runs(runs) if runs else (np.zeros(0, np.uint64), np.zeros(0, np.uint64))
    del runs
    if keys.size >= int(SENTINEL):
        raise InvalidOptionError(f"more than 2^32-1 distinct {order}-grams; split the corpus or lower the order")
    ids = None
    if need_ids:
        ids = np.lib.format.open_memmap(workdir / f"ids{order}.npy", mode="w+", dtype=np.uint32, shape=(n,))
        if n:
            ids[0] = SENTINEL
        for a, b, ci in chunks:
            valid = (prev_ids[a - 1:b - 1] != SENTINEL) & (tokens[a:b] != SENTINEL)
            local = np.searchsorted(keys, np.load(workdir / f"uniq{ci}.npy")).astype(np.uint32)
            out = np.full(b - a, SENTINEL, dtype=np.uint32)
            out[valid] = local[np.load(workdir / f"inv{ci}.npy")]
            ids[a:b] = out
            (workdir / f"inv{ci}.npy").unlink()
            (workdir / f"uniq{ci}.npy").unlink()
        ids.flush()
    return keys, counts, ids


def _parent_totals(keys, counts, parent_base, parent_count, vocab_size):
    """Total count of continuations of every parent entry (the C(c) of p = C(c x) / C(c))."""
    totals = np.zeros(parent_count, dtype=np.uint64)
    step = 1 << 24
    for i in range(0, keys.size, step):
        parents = (keys[i:i + step] // np.uint64(vocab_size) - np.uint64(parent_base + 1)).astype(np.int64)
        # bincount's float64 weights are exact below 2^53, far above any count here
        totals += np.bincount(parents, weights=counts[i:i + step], minlength=parent_count).astype(np.uint64)
    return totals


def build(token_docs: Iterable, vocab_size: int, out_path, max_order: int = 6, *, orders=None,
          tokenizer_name: str = "", tokenizer_fingerprint: str = "", corpora=(), extra_header=None,
          chunk_tokens: int = 1 << 22, merge_limit: int = 1 << 24, workdir=None, progress: bool = False,
          total_tokens_hint=None, allow_empty: bool = True) -> BuildStats:
    """Count n-grams of orders 1..max_order over `token_docs` (iterable of int arrays) and write `out_path`.

    Documents are separate: no n-gram crosses a document boundary. Returns BuildStats with timings. With
    allow_empty=False a corpus without a token is an error and nothing is written.
    """
    if max_order < 1 or max_order > 15:
        raise InvalidOptionError(f"max_order must be in 1..15, got {max_order}")
    if not 1 < vocab_size < (1 << 24):
        raise InvalidOptionError(f"vocab_size must be in 2..2^24, got {vocab_size}")
    orders = list(orders) if orders is not None else list(range(2, max_order + 1)) or [1]
    stats = BuildStats()
    tmp_root = Path(tempfile.mkdtemp(prefix="multidraft-ngram-", dir=workdir))
    bar = None
    try:
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=total_tokens_hint, unit="tok", unit_scale=True, desc="tokenize+spool", dynamic_ncols=True)
        tick = bar.update if bar is not None else _noop_progress
        t0 = time.perf_counter()
        token_file = tmp_root / "tokens.u32"
        stats.num_tokens, stats.num_documents, corpus_sha = spool_tokens(token_docs, token_file, vocab_size, tick)
        stats.seconds_spool = time.perf_counter() - t0
        if not stats.num_tokens and not allow_empty:
            raise InvalidOptionError(f"the corpus has no text to count ({stats.num_documents} empty documents): "
                                     "give a data set name, a text file or a folder of text files")
        if bar is not None:
            bar.close()
            bar = tqdm(total=(stats.num_tokens + stats.num_documents) * max(1, max_order - 1),
                       unit="tok", unit_scale=True, desc="count", dynamic_ncols=True)
            tick = bar.update
        t1 = time.perf_counter()
        n = stats.num_tokens + stats.num_documents
        tokens = np.memmap(token_file, dtype=np.uint32, mode="r", shape=(n,)) if n else np.zeros(0, np.uint32)
        level_keys, level_counts, totals = _count_levels(tokens, vocab_size, max_order, tmp_root, chunk_tokens,
                                                         merge_limit, tick)
        stats.seconds_count = time.perf_counter() - t1
        if bar is not None:
            bar.close()
            bar = None
        header = {
            "format": "multidraft-ngram",
            "tokenizer": tokenizer_name,
            "tokenizer_fingerprint": tokenizer_fingerprint,
            "vocab_size": int(vocab_size),
            "max_order": int(max_order),
            "orders": [int(o) for o in orders],
            "corpus_digest": corpus_sha,
            "corpora": list(corpora),
            "num_tokens": stats.num_tokens,
            "num_documents": stats.num_documents,
        }
        _write(out_path, stats, level_keys, level_counts, totals, header, extra_header)
        return stats
    finally:
        if bar is not None:
            bar.close()
        shutil.rmtree(tmp_root, ignore_errors=True)


def _count_levels(tokens, vocab_size: int, max_order: int, tmp_root: Path, chunk_tokens: int, merge_limit: int,
                  tick):
    """Keys and counts of levels 1..max_order and each level's parent totals (None for the top level). Finished
    levels are parked on disk under `tmp_root` (memory-mapped back), so memory holds one level at a time."""
    n = tokens.size
    # Level 1 is dense over the vocabulary.
    uni = np.zeros(vocab_size, dtype=np.uint64)
    for i in range(0, n, chunk_tokens):
        part = tokens[i:i + chunk_tokens]
        uni += np.bincount(part[part != SENTINEL], minlength=vocab_size).astype(np.uint64)
    level_keys = [np.arange(vocab_size, dtype=np.uint64)]
    level_counts = [uni]
    totals = []
    prev_ids = tokens
    parent_base, next_base = 0, vocab_size  # global index of the first entry of level order-1 / order
    for order in range(2, max_order + 1):
        keys, counts, ids = count_level(order, tokens, prev_ids, vocab_size, parent_base, tmp_root,
                                        need_ids=order < max_order, chunk_tokens=chunk_tokens,
                                        merge_limit=merge_limit, progress=tick)
        if (next_base + keys.size + 2) * vocab_size >= 2**63:
            raise InvalidOptionError("too many n-grams for 64-bit keys; split the corpus or lower the order")
        totals.append(_parent_totals(keys, counts, parent_base, level_keys[-1].size, vocab_size))
        parent_base, next_base = next_base, next_base + keys.size
        # Park finished levels on disk so memory holds only the level being counted.
        np.save(tmp_root / f"keys{order}.npy", keys)
        np.save(tmp_root / f"counts{order}.npy", counts)
        level_keys.append(np.load(tmp_root / f"keys{order}.npy", mmap_mode="r"))
        level_counts.append(np.load(tmp_root / f"counts{order}.npy", mmap_mode="r"))
        del keys, counts
        if prev_ids is not tokens:
            del prev_ids
        prev_ids = ids
    totals.append(None)  # the top level has no continuations
    return level_keys, level_counts, totals


def _write(out_path, stats: BuildStats, level_keys, level_counts, totals, header: dict, extra_header) -> None:
    """The file: `header` plus the per-level table (offsets, Good-Turing n1/n2), then the arrays."""
    count_dtype = np.uint32 if stats.num_tokens < (1 << 32) - 1 else np.uint64
    sizes = [int(k.size) for k in level_keys]
    offsets = np.concatenate(([0], np.cumsum(sizes))).tolist()
    levels = []
    for i, k in enumerate(level_keys):
        c = level_counts[i]
        n1 = int(np.count_nonzero(c == 1)) if i else 0
        n2 = int(np.count_nonzero(c == 2)) if i else 0
        levels.append({"order": i + 1, "offset": offsets[i], "size": sizes[i], "n1": n1, "n2": n2})
        stats.level_sizes[i + 1] = sizes[i]
    header = {**header, "levels": levels, **(extra_header or {})}
    arrays = {
        "keys": (np.uint64, list(level_keys)),
        "counts": (count_dtype, level_counts),
        # one trailing 0: the total of the "missing" id that queries use for unseen contexts
        "cont_total": (count_dtype, [t for t in totals if t is not None] + [np.zeros(1, np.uint64)]),
    }
    fileformat.write(out_path, header, arrays)
