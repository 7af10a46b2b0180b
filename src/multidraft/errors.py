"""Errors a user can act on. Each message says what went wrong and what to do about it.

The CLI prints these as one line and exits non-zero; anything else is a bug in multidraft.
"""


class MultidraftError(Exception):
    """Base class of every user-facing error in multidraft."""


class ModelNotFoundError(MultidraftError):
    """An alias, path or HF id that names no model we can load."""


class CorruptCacheError(MultidraftError):
    """A cache entry (model, data, n-gram file) is partial or fails its checksum."""


class InvalidOptionError(MultidraftError, ValueError):
    """A decoding option has a bad value or an unknown name. `param`: the option or request field it is about, where
    the check knows it (a server's error body names it)."""

    def __init__(self, *args, param=None):
        super().__init__(*args)
        self.param = param


class OutputPathError(InvalidOptionError):
    """An output path that cannot take the output: an existing folder for a file, or a place that cannot be written."""


class ServerLimitError(InvalidOptionError):
    """A value the library allows but past a server's cap (serve --max-beams, ...): the operator can raise it."""


class UnknownMethodError(InvalidOptionError):
    """A `method=` name that no decoder implements."""


class PromptError(MultidraftError, ValueError):
    """An empty prompt, or one longer than the model's context."""


class NumericalError(MultidraftError):
    """The model produced NaN or infinite logits."""


class TokenizerMismatchError(MultidraftError):
    """Two components (draft and target model, n-gram file and model) use different vocabularies."""


class DataNotFoundError(MultidraftError):
    """A data set or corpus that has not been pulled into the cache."""


class OptionalDependencyError(MultidraftError):
    """A feature needs an optional package (an extra such as `multidraft[llama]`) that is not installed."""


def reraise_fatal(error: BaseException) -> None:
    """Where one request's error fails that request only (the engine), stops included (a server's JobCancelled
    raised by on_token is a BaseException): an interrupt of the whole process goes on up."""
    if is_interrupt(error):
        raise error


def is_interrupt(error: BaseException) -> bool:
    """An interrupt of the whole process (Ctrl-C, exit), not one request's failure."""
    return isinstance(error, (KeyboardInterrupt, SystemExit, GeneratorExit))
