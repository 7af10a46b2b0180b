"""Default n-gram files (Superposed Decoding, blockwise rescoring): where they live and how they are built.

    multidraft ngram build-default --model qwen2.5-coder-0.5b      # also serves qwen2.5-coder-1.5b
    multidraft ngram build-default --model smollm2-135m --corpus linux-doc

One file per tokenizer (vocab family): <cache>/ngram/spd-<vocab_family>.ngram, orders 2..6, counted on
the pulled corpora (`multidraft data pull sharegpt linux-doc` first). Every HOLDOUT-th document is left
out of the counts: the SPD evaluation draws its prefixes from exactly those documents, so the n-grams
never saw the text they are asked to continue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Sequence

from multidraft.tokenizer_identity import vocab_family, vocab_fingerprint

DEFAULT_CORPORA = ("sharegpt", "linux-doc")
DEFAULT_ORDERS = (2, 3, 4, 5, 6)
HOLDOUT = 100  # document i is held out (never counted) when i % HOLDOUT == 0


def build_command(model: str = "<model alias>") -> str:
    return f"multidraft ngram build-default --model {model}"


def default_path(vocab_family: str) -> Path:
    from multidraft import paths

    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in vocab_family)
    return paths.subdir("ngram") / f"spd-{safe}.ngram"


def vocab_family_of(lm) -> str:
    return vocab_family(lm)


def iter_corpus_documents(name: str, held_out: bool, roles=("human", "gpt"), first_message_only: bool = False
                          ) -> Iterator[str]:
    """Documents of a pulled corpus: the counted ones (held_out=False) or the held-out ones (True).

    ShareGPT is split by conversation (all its messages go to the same side), other corpora by document;
    a ShareGPT document is one message (`first_message_only`: only the first one of `roles` per conversation)."""
    from multidraft import data

    if name == "sharegpt":
        for index, conv in enumerate(data.load_sharegpt_conversations()):
            if (index % HOLDOUT == 0) != held_out:
                continue
            for message in conv["conversations"]:
                if message.get("from") in roles and message.get("value"):
                    yield message["value"]
                    if first_message_only:
                        break
        return
    for index, text in enumerate(data.iter_documents(name)):
        if (index % HOLDOUT == 0) == held_out:
            yield text


def build_default(model: str, corpora: Sequence[str] = DEFAULT_CORPORA, out=None, force: bool = False,
                  progress: bool = True) -> Path:
    """Build (unless present) the default SPD n-gram file for `model`'s tokenizer; returns its path."""
    from multidraft.models.loader import load_tokenizer
    from multidraft.ngram import build
    from multidraft.ngram.corpus import tokenize_documents

    tokenizer = load_tokenizer(model)
    family = _family_of_alias(model) or vocab_fingerprint(tokenizer)
    path = Path(out) if out else default_path(family)
    if path.exists() and not force:
        print(f"{path} exists (use --force to rebuild)")
        return path

    def texts():
        for name in corpora:
            yield from iter_corpus_documents(name, held_out=False)

    stats = build(tokenize_documents(texts(), tokenizer), len(tokenizer), path, max_order=max(DEFAULT_ORDERS),
                  orders=list(DEFAULT_ORDERS), tokenizer_name=model,
                  tokenizer_fingerprint=vocab_fingerprint(tokenizer), corpora=list(corpora),
                  extra_header={"holdout": f"documents with index % {HOLDOUT} == 0 left out (SPD eval prefixes)"},
                  progress=progress, allow_empty=False)
    print(f"wrote {path}: {stats.num_tokens:,} tokens in {stats.num_documents:,} documents "
          f"(spool {stats.seconds_spool:.0f}s, count {stats.seconds_count:.0f}s)")
    return path


def _family_of_alias(model: str):
    try:
        from multidraft.models.registry import get_spec

        spec = get_spec(model)
    except Exception:  # a local folder or HF id: fall back to the vocab fingerprint
        return None
    return getattr(spec, "vocab_family", None)
