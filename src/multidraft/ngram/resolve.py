"""Which n-gram file serves a target model: the one resolver for every method that reads n-grams
(Superposed Decoding, blockwise rescoring), with one error class per failure.

- a missing file (the default one of the model's tokenizer, or a given path): DataNotFoundError naming the command
  that builds it;
- a file built for another tokenizer: TokenizerMismatchError (from `NGramModel.check_tokenizer`);
- anything that is neither a path nor an NGramModel: InvalidOptionError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from multidraft.artifacts import Artifacts, artifacts_or_new
from multidraft.errors import DataNotFoundError, InvalidOptionError
from multidraft.ngram.model import NGramModel
from multidraft.ngram.defaults import build_command, default_path, vocab_family_of
from multidraft.tokenizer_identity import model_vocab_fingerprint

DEFAULT_NAMES = ("", "default", "auto")

def resolve_ngram(lm, ngram=None, artifacts: Optional[Artifacts] = None) -> NGramModel:
    """The n-gram model for `lm`: an NGramModel, a file path, or None (or "default") for its tokenizer's default file.
    A file is loaded (memory-mapped, its checksum verified) once into `artifacts`, the caller's loaded objects."""
    artifacts = artifacts_or_new(artifacts)
    if ngram is None or (isinstance(ngram, str) and ngram in DEFAULT_NAMES):
        path = default_path(vocab_family_of(lm))
        if not path.exists():
            raise DataNotFoundError(
                f"no n-gram file for {lm.name}'s tokenizer at {path}; build it with "
                f"`{build_command(lm.name)}` (after `multidraft data pull sharegpt linux-doc`), or pass a file "
                "from `multidraft ngram build --tokenizer <model> ...` (ngram=PATH)")
        ngram = path
    if isinstance(ngram, (str, Path)):
        ngram = _load(Path(ngram).expanduser(), artifacts)
    if not isinstance(ngram, NGramModel):
        raise InvalidOptionError(f"ngram must be a path or an NGramModel, got {type(ngram).__name__}")
    ngram.check_tokenizer(lm.tokenizer, model_vocab_fingerprint(lm))     # the model keeps its fingerprint: cheap
    return ngram


def _load(path: Path, artifacts: Artifacts) -> NGramModel:
    if not path.exists():
        raise DataNotFoundError(f"n-gram file {path} does not exist; build one with "
                                "`multidraft ngram build --tokenizer <model> --corpus <name> --out FILE`")
    return artifacts.get(("ngram", str(path.resolve())), lambda: NGramModel.load(path))
