"""`load_model`: the loader's HF model and tokenizer wrapped in the `LM` runner."""

from __future__ import annotations

from multidraft.models.runner import LM


def load_model(name_or_path, dtype=None, device=None, runner: str = "eager", **kwargs) -> LM:
    """runner: "eager", "fast", "static" or "auto" (see `LM.use_runner`)."""
    from transformers.utils import logging as hf_logging

    from multidraft.models.loader import load_hf_model
    hf_logging.disable_progress_bar()          # our own progress bars cover the long steps (pull, convert)
    model, tokenizer, info = load_hf_model(name_or_path, dtype=dtype, device=device, **kwargs)
    return LM(model, tokenizer, name=getattr(info, "name", str(name_or_path)), info=info, runner=runner)
