"""Heads files: `<cache>/heads/<name>.pt` = FFN weights + shortlist + what they were trained for.

A file records the base model's fingerprint (shape + final norm + unembedding sample) and the tokenizer's
vocab fingerprint; loading it for another model or tokenizer is a clear error, not garbage drafts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import torch

from multidraft import paths
from multidraft.errors import CorruptCacheError, InvalidOptionError, ModelNotFoundError, TokenizerMismatchError
from multidraft.fsutil import atomic_path
from multidraft.blockwise.heads import BlockwiseHeads, model_fingerprint
from multidraft.tokenizer_identity import model_vocab_fingerprint

FORMAT = 1


def heads_dir() -> Path:
    return paths.subdir("heads")


def safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(text))


def default_heads_path(model_name: str, corpus: str, num_heads: int) -> Path:
    return heads_dir() / f"{safe_name(Path(str(model_name)).name)}-{safe_name(corpus)}-h{num_heads}.pt"


def save_heads(heads: BlockwiseHeads, path, lm=None, **meta) -> Path:
    """Write heads atomically. With `lm`, record its fingerprints (required for loading with checks)."""
    info = dict(heads.meta)
    info.update(meta)
    if lm is not None:
        info.update(base_model=lm.name, model_fingerprint=model_fingerprint(lm),
                    tokenizer_fingerprint=model_vocab_fingerprint(lm), hidden_layer=lm.num_layers,
                    vocab_size=lm.vocab_size)
    info.update(num_heads=heads.num_heads, hidden_size=heads.hidden_size, ffn_size=heads.ffn_size,
                shortlist_size=int(heads.shortlist.numel()))
    state = {k: v.detach().cpu() for k, v in heads.state_dict().items()}
    with atomic_path(path) as tmp:
        torch.save({"format": FORMAT, "meta": info, "state": state}, tmp)
    heads.meta = info
    return Path(path)


def read_meta(path) -> dict:
    return _read(path)["meta"]


def _read(path) -> dict:
    if Path(path).is_dir():
        raise ModelNotFoundError(f"{path} is a folder, not a heads file; name the .pt file (`multidraft heads "
                                 "list` shows them)")
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ModelNotFoundError(f"no heads file at {path}; train one with `multidraft heads train`") from None
    except Exception as exc:  # truncated or not a torch file
        first = str(exc).split(". ")[0].splitlines()[0][:160] if str(exc) else type(exc).__name__   # torch's are long
        raise CorruptCacheError(f"heads file {path} cannot be read ({first}); delete it and train again") from None
    if not isinstance(blob, dict) or blob.get("format") != FORMAT or "state" not in blob:
        raise CorruptCacheError(f"{path} is not a multidraft heads file (format {FORMAT}); train the heads again")
    return blob


def load_heads(lm, path=None, num_heads: Optional[int] = None, check: bool = True) -> BlockwiseHeads:
    """Heads for `lm` from `path` (default: the newest matching file in the cache), bound to lm.

    Raises when the file was trained for another base model or tokenizer, or holds fewer than num_heads heads."""
    if path is None:
        path = find_heads(lm, num_heads)
    blob = _read(path)
    meta = blob["meta"]
    if check:
        want_tok, have_tok = meta.get("tokenizer_fingerprint"), model_vocab_fingerprint(lm)
        if want_tok and want_tok != have_tok:
            raise TokenizerMismatchError(
                f"heads {path} were trained for a model with another tokenizer ({meta.get('base_model')}); "
                f"train heads for {lm.name} with `multidraft heads train --model {lm.name}`")
        want, have = meta.get("model_fingerprint"), model_fingerprint(lm)
        if want and want != have:
            raise InvalidOptionError(
                f"heads {path} were trained for base model {meta.get('base_model')!r} ({want}), not for "
                f"{lm.name} ({have}); train heads for it with `multidraft heads train --model {lm.name}`")
    trained = int(meta["num_heads"])
    if num_heads is not None and num_heads > trained:
        raise InvalidOptionError(f"num_heads={num_heads} but heads {path} hold only {trained} heads "
                                 f"(head 1 = the base's own); use num_heads <= {trained} or train more heads")
    state = blob["state"]
    heads = BlockwiseHeads(trained, int(meta["hidden_size"]), int(meta["ffn_size"]), state["shortlist"], meta)
    heads.load_state_dict(state)
    heads.meta["path"] = str(path)
    return heads.eval().requires_grad_(False).bind(lm)


def list_heads() -> list[tuple[Path, dict]]:
    out = []
    for file in sorted(heads_dir().glob("*.pt")):
        try:
            out.append((file, read_meta(file)))
        except Exception:  # a foreign or broken file: listed by `heads list` as unreadable
            out.append((file, {}))
    return out


def find_heads(lm, num_heads: Optional[int] = None) -> Path:
    """The newest heads file in the cache trained for lm's base model (with at least num_heads heads)."""
    fingerprint = model_fingerprint(lm)
    matches = [(f, m) for f, m in list_heads() if m.get("model_fingerprint") == fingerprint]
    if not matches:
        raise ModelNotFoundError(f"no blockwise heads for {lm.name} in {heads_dir()}; train them with "
                                 f"`multidraft heads train --model {lm.name} --corpus cpython-stdlib --num-heads 4`")
    enough = [(f, m) for f, m in matches if num_heads is None or int(m.get("num_heads", 0)) >= num_heads]
    if not enough:
        best = max(int(m.get("num_heads", 0)) for _, m in matches)
        raise InvalidOptionError(f"num_heads={num_heads} but the heads trained for {lm.name} hold at most {best}; "
                                 f"lower num_heads or train more with `multidraft heads train --num-heads {num_heads}`")
    return max(enough, key=lambda fm: fm[0].stat().st_mtime)[0]


def describe(path) -> str:
    return json.dumps(read_meta(path), indent=2, sort_keys=True, default=str)
