"""Training data for the heads: hidden states of the frozen base over a corpus, cached in shards.

The base runs once over `num_tokens` corpus tokens (sequences of `seq_len`); each shard stores the last
block's output (fp16), the corpus tokens and the base's own greedy prediction at every position. Shards are
written atomically, so an interrupted build resumes where it stopped. ShareGPT conversations go through the
model's chat template, so chat hidden states look like the ones the heads see at decode time.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np
import torch

from multidraft import paths
from multidraft.errors import InvalidOptionError
from multidraft.fsutil import atomic_path
from multidraft.blockwise.heads import model_fingerprint

SHARD_SEQUENCES = 8
MIN_SEQUENCE = 32
SEQUENCES_PER_DOCUMENT = 2     # spread the budget over many documents rather than a few long ones


def _documents(name: str, tokenizer) -> Iterator[list[int]]:
    if name == "sharegpt" and getattr(tokenizer, "chat_template", None):
        from multidraft.data import load_sharegpt_conversations

        roles = {"human": "user", "gpt": "assistant"}
        for conv in load_sharegpt_conversations():
            messages = [{"role": roles[m["from"]], "content": m["value"]} for m in conv["conversations"]
                        if m.get("from") in roles and m.get("value")]
            if len(messages) >= 2 and messages[0]["role"] == "user":
                ids = tokenizer.apply_chat_template(messages[:2], tokenize=True)
                yield list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        return
    from multidraft.ngram.corpus import iter_corpus_texts

    for text in iter_corpus_texts(name):
        yield tokenizer(text, add_special_tokens=False)["input_ids"]


def plan_sequences(corpora: Sequence[str], tokenizer, num_tokens: int, seq_len: int) -> list[list[int]]:
    """Deterministic list of training sequences: an equal token budget per corpus, corpora interleaved."""
    per_corpus = []
    for name in corpora:
        budget, seqs = num_tokens // len(corpora), []
        for doc in _documents(name, tokenizer):
            for start in range(0, min(len(doc), SEQUENCES_PER_DOCUMENT * seq_len), seq_len):
                piece = doc[start:start + seq_len]
                if len(piece) >= MIN_SEQUENCE and budget > 0:
                    seqs.append(piece[:budget])
                    budget -= len(seqs[-1])
            if budget <= 0:
                break
        per_corpus.append(seqs)
    out = []
    for i in range(max(map(len, per_corpus), default=0)):
        out += [seqs[i] for seqs in per_corpus if i < len(seqs)]
    return out


def cache_dir(lm, corpora: Sequence[str], num_tokens: int, seq_len: int) -> Path:
    key = hashlib.sha256(f"{model_fingerprint(lm)}|{','.join(corpora)}|{num_tokens}|{seq_len}".encode()).hexdigest()[:12]
    return paths.subdir("heads") / "data" / f"{'+'.join(corpora)}-{key}"


def hidden_rows(lm, sequences: Sequence[Sequence[int]], first_seq_id: int = 0) -> dict[str, np.ndarray]:
    """The training rows of `sequences`: the base's last hidden state (fp16), the token, the base's greedy
    prediction and the sequence id of every position (what `train_heads` reads)."""
    hidden, tokens, argmax, seq_ids = [], [], [], []
    for offset, seq in enumerate(sequences):
        out = lm.forward(lm.new_cache(), seq, hidden_layer=lm.num_layers)
        hidden.append(out.hidden.to(torch.float16).cpu().numpy())
        argmax.append(out.logits.argmax(-1).cpu().numpy().astype(np.int32))
        tokens.append(np.asarray(seq, dtype=np.int32))
        seq_ids.append(np.full(len(seq), first_seq_id + offset, dtype=np.int32))
    return {"hidden": np.concatenate(hidden), "tokens": np.concatenate(tokens), "argmax": np.concatenate(argmax),
            "seq_ids": np.concatenate(seq_ids)}


def build_hidden_cache(lm, corpora: Sequence[str], num_tokens: int = 32768, seq_len: int = 256,
                       log=print) -> Path:
    """Run the base over the corpus once (resumable) and return the shard folder."""
    if seq_len < MIN_SEQUENCE:
        raise InvalidOptionError(f"--seq-len must be at least {MIN_SEQUENCE} tokens, got {seq_len}")
    sequences = plan_sequences(corpora, lm.tokenizer, num_tokens, seq_len)
    if not sequences:
        raise InvalidOptionError(f"the corpus {', '.join(corpora)} holds no sequence of {MIN_SEQUENCE} tokens or "
                                 "more to train on; give a larger corpus")
    folder = cache_dir(lm, corpora, num_tokens, seq_len)
    folder.mkdir(parents=True, exist_ok=True)
    shards = [sequences[i:i + SHARD_SEQUENCES] for i in range(0, len(sequences), SHARD_SEQUENCES)]
    started, done_tokens = time.perf_counter(), 0
    for index, shard in enumerate(shards):
        path = folder / f"shard-{index:05d}.npz"
        if path.exists():
            continue
        rows = hidden_rows(lm, shard, first_seq_id=index * SHARD_SEQUENCES)
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as handle:
                np.savez(handle, **rows)
        done_tokens += sum(map(len, shard))
        rate = done_tokens / (time.perf_counter() - started)
        log(f"hidden states: shard {index + 1}/{len(shards)} ({rate:.0f} tokens/s)")
    (folder / "complete").write_text(str(len(shards)))
    return folder


def load_hidden_cache(folder) -> dict[str, np.ndarray]:
    files = sorted(Path(folder).glob("shard-*.npz"))
    parts = [np.load(f) for f in files]
    return {key: np.concatenate([p[key] for p in parts]) for key in ("hidden", "tokens", "argmax", "seq_ids")}
