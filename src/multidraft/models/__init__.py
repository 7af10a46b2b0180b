"""Models: the registry of pullable aliases, the offline cache, and loading with transformers."""

from multidraft.models.loader import (
    ModelInfo,
    ResolvedModel,
    load_hf_model,
    load_model,
    load_tokenizer,
    pull,
    resolve,
)
from multidraft.models.registry import MODELS, ModelSpec, aliases, get_spec
