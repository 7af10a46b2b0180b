"""The models one server process runs for its `ServerConfig`: the target, the --draft model and the rescorers.

`multidraft serve` calls it once; `serve --ray` calls it in every replica (server/ray_deployment.py), so each
replica loads exactly what a single server would from the same flags.
"""

from __future__ import annotations

import dataclasses

from multidraft.models.threads import apply_for_model
from multidraft.server.config import ServerConfig


def load_served(config: ServerConfig, model: str, *, draft=None, dtype=None, device=None, runner="auto",
                threads=None):
    """(lm, draft_lm, config): `threads` is what `measure_default_threads` planned (or a number). The rescorers named
    in config.artifacts["rescorer"] (NAME: MODEL) are loaded here and put in a new config's mapping, so the caller's
    config keeps its model names."""
    import multidraft

    lm = multidraft.load_model(model, dtype=dtype, device=device, runner=runner)
    apply_for_model(lm, threads)
    draft_lm = multidraft.load_model(draft, dtype=dtype, device=device, runner=runner) if draft else None
    rescorers = {name: multidraft.load_model(name_or_path, dtype=lm.dtype, device=str(lm.device))
                 for name, name_or_path in (config.artifacts.get("rescorer") or {}).items()}
    if rescorers:
        config = dataclasses.replace(config, artifacts={**config.artifacts, "rescorer": rescorers})
    return lm, draft_lm, config
