"""multidraft: draft-based decoding for causal language models.

    import multidraft
    lm = multidraft.load_model("qwen2.5-coder-1.5b")
    result = multidraft.generate(lm, "def fibonacci(n):", method="pld", max_new_tokens=64)
    print(result.text, result.stats.summary())
"""

from multidraft import openmp_wait  # noqa: F401,I001  (first: sets OpenMP's spin before torch loads it)
from multidraft.api import generate, generate_request
from multidraft.artifacts import Artifacts
from multidraft.engine import Engine, generate_batch
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
from multidraft.methods import available_methods
from multidraft.models.runner import LM
from multidraft.request import Request
from multidraft.prefix_cache import PrefixCache
from multidraft.suffix import SuffixStore
from multidraft.types import DecodeStats, Draft, Generation


def load_model(name_or_path, dtype=None, device=None, **kwargs) -> LM:
    """Load a registry alias, a local HF folder, a GGUF file or a cached HF id as an `LM` (offline)."""
    from multidraft.models.loader import load_model as _load
    lm = _load(name_or_path, dtype=dtype, device=device, **kwargs)
    # Loading ran parallel regions (repacking, the kernels' self-check) in this thread: let its OpenMP workers go,
    # so forwards run from another thread (a web framework's worker) keep libgomp's spinning (openmp_wait.py); a
    # later forward in this thread starts a new pool.
    openmp_wait.release_thread_pool()
    return lm


__version__ = "0.1.0"
__all__ = ["load_model", "generate", "generate_request", "Engine", "generate_batch", "Request", "Artifacts", "PrefixCache", "SuffixStore", "Generation", "DecodeStats", "Draft", "LM", "available_methods",
           "MultidraftError", "ModelNotFoundError", "CorruptCacheError", "InvalidOptionError", "UnknownMethodError",
           "PromptError", "NumericalError", "TokenizerMismatchError", "DataNotFoundError"]
