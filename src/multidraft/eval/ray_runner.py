"""`multidraft bench --ray ADDRESS|local`: prompts spread over Ray actors, each holding one copy of the models.

The driver keeps the results file: workers return a prompt's rows, the driver appends them, so resume works
exactly as in a local run. Each actor runs all methods of a prompt in turn (interleaved, as locally). Workers of a
remote cluster need multidraft, its models and data installed; `local` starts a private Ray instance here.
Ray is imported only here, so multidraft runs without it.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Iterator

from multidraft.errors import MultidraftError


def require_ray():
    try:
        import ray
    except ImportError:
        raise MultidraftError("--ray needs Ray: pip install 'multidraft[ray]' (or pip install ray)") from None
    return ray


class BenchWorker:
    """One model copy (and draft) in a Ray actor; runs every pending method of one prompt per call."""

    def __init__(self, config, threads: int, warm_item, warm_methods):
        import torch

        from multidraft.artifacts import Artifacts
        from multidraft.eval.bench_run import load_models, warm_up
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        torch.set_num_threads(threads)
        self.config = config
        self.lm, self.draft_lm = load_models(config)
        self.artifacts = Artifacts()
        warm_up(self.lm, self.draft_lm, warm_item, warm_methods, config, self.artifacts)

    def run(self, item, methods, reference, greedy_reference=None) -> list[dict]:
        from multidraft.eval.bench_run import run_prompt
        return list(run_prompt(self.lm, self.draft_lm, item, methods, self.config, reference, self.artifacts,
                               greedy_reference))


def run_with_ray(address: str, workers: int, config, work: list[tuple]) -> Iterator[list[dict]]:
    """Yield the rows of each work item ((item, methods, reference, greedy_reference)) as workers finish them."""
    ray = require_ray()
    started_here = not ray.is_initialized()
    if started_here:
        if address == "local":
            ray.init(num_cpus=max(workers, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False,
                     configure_logging=False)
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    threads = max(1, (os.cpu_count() or 1) // workers) if address == "local" else 1
    every = list({m.label: m for _, todo, *_ in work for m in todo}.values())
    actor_class = ray.remote(num_cpus=threads)(BenchWorker)
    actors = [actor_class.remote(config, threads, work[0][0], every) for _ in range(min(workers, len(work)))]
    queue = deque(work)
    pending = {}
    try:
        for actor in actors:
            if queue:
                pending[actor.run.remote(*queue.popleft())] = actor
        while pending:
            [ready], _ = ray.wait(list(pending), num_returns=1)
            actor = pending.pop(ready)
            if queue:
                pending[actor.run.remote(*queue.popleft())] = actor
            yield ray.get(ready)
    finally:
        for actor in actors:
            ray.kill(actor)
        if started_here:
            ray.shutdown()
