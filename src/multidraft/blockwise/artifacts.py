"""The files and models `method="blockwise"` needs, resolved before its drafter is built (methods.py's
`load_artifacts`): the trained heads (a file, or the stored default for the target), the n-gram model of
rescoring="ngram" and the rescoring LM of rescoring="neural". The drafter itself only takes ready objects.
Each is loaded once into the caller's `multidraft.Artifacts` (heads per target model)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from multidraft.artifacts import Artifacts, artifacts_or_new
from multidraft.errors import InvalidOptionError, TokenizerMismatchError
from multidraft.ngram.resolve import resolve_ngram
from multidraft.tokenizer_identity import model_vocab_fingerprint


def resolve_options(lm, options: dict, artifacts: Optional[Artifacts] = None) -> dict:
    """blockwise's options with `heads`, `ngram` and `rescorer` as ready objects (as far as `rescoring` needs them)."""
    from multidraft.blockwise.heads_store import load_heads

    artifacts = artifacts_or_new(artifacts)
    options = dict(options)
    heads, num_heads = options["heads"], options["num_heads"]
    if heads is None or isinstance(heads, (str, Path)):
        options["heads"] = artifacts.get(("heads", str(heads), num_heads), lambda: load_heads(lm, heads, num_heads),
                                         target=lm)
    elif num_heads is not None and num_heads > heads.num_heads:
        raise InvalidOptionError(f"num_heads={num_heads} but the heads hold only {heads.num_heads}")
    if options["rescoring"] == "ngram":
        options["ngram"] = resolve_ngram(lm, options.get("ngram") or options["ngram_path"], artifacts)
    if options["rescoring"] == "neural":
        if options["rescorer"] is None:
            raise InvalidOptionError("rescoring='neural' needs rescorer=<a smaller model sharing the tokenizer: alias, "
                                     "path or loaded LM>; use rescoring='ngram' to rescore with an n-gram model")
        options["rescorer"] = resolve_rescorer(lm, options["rescorer"], artifacts)
    return options


def resolve_rescorer(lm, rescorer, artifacts: Optional[Artifacts] = None):
    """A neural rescoring LM (alias, path or LM) that must share lm's tokenizer."""
    if isinstance(rescorer, (str, Path)):
        from multidraft.models.loader import load_model

        rescorer = artifacts_or_new(artifacts).get(("rescorer", str(rescorer), str(lm.dtype)),
                                                   lambda: load_model(str(rescorer), dtype=lm.dtype))
    if model_vocab_fingerprint(rescorer) != model_vocab_fingerprint(lm):
        raise TokenizerMismatchError(f"rescorer {rescorer.name} does not share the tokenizer of {lm.name}; "
                                     "neural rescoring needs a smaller LM of the same vocabulary family")
    return rescorer
