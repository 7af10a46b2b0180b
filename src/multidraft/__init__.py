"""multidraft: draft-based decoding for causal language models."""

from multidraft.errors import (
    CorruptCacheError,
    DataNotFoundError,
    InvalidOptionError,
    ModelNotFoundError,
    MultidraftError,
    NumericalError,
    PromptError,
    TokenizerMismatchError,
    UnknownMethodError,
)

__version__ = "0.1.0"
