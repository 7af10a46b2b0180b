"""The draft model of a generation: an `LM` the caller passes, or an alias / path loaded into the caller's
`multidraft.Artifacts` (once per server, bench run or generate call), and the check that it shares the target's tokenizer (draft token ids must mean the same tokens to the target).

The one resolver of the `draft_model` artifact: methods.py calls it before building a drafter, so the drafters
receive a ready `LM` and never load one."""

from __future__ import annotations

import os
from typing import Optional

from multidraft.artifacts import Artifacts, artifacts_or_new
from multidraft.errors import InvalidOptionError, TokenizerMismatchError
from multidraft.models.loader import load_model
from multidraft.models.runner import LM
from multidraft.tokenizer_identity import same_vocabulary, vocab_family

# Target alias -> default draft alias (same tokenizer).
DEFAULT_DRAFTS = {"qwen2.5-coder-1.5b": "qwen2.5-coder-0.5b"}

def check_same_vocabulary(draft: LM, target: LM) -> None:
    if same_vocabulary(draft, target):
        usable = min(target.vocab_size, len(target.tokenizer))    # ids the target takes and gives
        if draft.vocab_size < usable:                      # one past the draft's rows: torch's IndexError mid-run
            raise TokenizerMismatchError(
                f"the draft model {draft.name!r} has {draft.vocab_size:,} token rows, fewer than the {usable:,} "
                f"tokens {target.name!r} reads and writes, so some tokens have no embedding in it; pick a draft "
                "model with the target's whole vocabulary")
        return
    raise TokenizerMismatchError(
        f"the draft model {draft.name!r} (vocabulary {vocab_family(draft)}, {len(draft.tokenizer):,} tokens) and the "
        f"target model {target.name!r} (vocabulary {vocab_family(target)}, {len(target.tokenizer):,} tokens) use "
        "different tokenizers, so draft token ids mean nothing to the target; pick a draft model of the target's "
        "family (e.g. qwen2.5-coder-0.5b for qwen2.5-coder-1.5b)")


def resolve_draft_model(draft_model, target: LM, method: str, artifacts: Optional[Artifacts] = None) -> LM:
    """An `LM`, or an alias / path / HF id loaded in the target's dtype on the target's device (kept in `artifacts`).

    A draft LM of another dtype or device is used as it is: it runs in its own dtype on its own device, and its
    logits are moved to the target's device as float32 before any probability is computed.
    """
    if draft_model is None:
        alias = DEFAULT_DRAFTS.get(getattr(target.info, "name", None))
        if alias is None:
            raise InvalidOptionError(
                f"method {method!r} needs draft_model=: an LM (multidraft.load_model(...)) or a model alias that "
                f"shares the tokenizer of {target.name!r}")
        draft_model = alias
    if isinstance(draft_model, (str, os.PathLike)):
        artifacts = artifacts_or_new(artifacts)
        key = ("draft_model", os.fspath(draft_model), str(target.dtype), str(target.device))
        runner = getattr(target, "runner", "eager")

        def load():
            artifacts.drop("draft_model")     # keep at most one loaded draft model alive
            # A draft session drives HF's cache with its own tree masks (new_cache(dynamic=True)): graphs would idle.
            return load_model(os.fspath(draft_model), dtype=target.dtype, device=target.device,
                              runner="auto" if runner == "static" else runner)
        draft = artifacts.get(key, load)
    elif isinstance(draft_model, LM):
        draft = draft_model
    else:
        raise InvalidOptionError(f"draft_model must be an LM (multidraft.load_model(...)) or a model alias/path, "
                                 f"got {type(draft_model).__name__}")
    if draft.device.type == "meta":
        raise InvalidOptionError(f"the draft model {draft.name!r} has no weights loaded (device 'meta')")
    check_same_vocabulary(draft, target)
    return draft
