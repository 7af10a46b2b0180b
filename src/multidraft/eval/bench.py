"""`multidraft bench`: every method and HF's own generate() on the same prompts, one row per prompt x method.

    from multidraft.eval.bench import BenchConfig, run_bench
    run_bench(BenchConfig(model="qwen2.5-coder-0.5b", tasks=["code_edit"], limit=3), out_dir="bench-out")

Columns come from the registry (eval/bench_methods.py), so a method that lands later is benchmarked without
code changes. The baseline `hf_greedy` (HF `generate()`, greedy) always runs first on each prompt, then our `greedy`:
speedups are measured against the baseline, and our lossless methods' equality against our greedy (the same model
and runner; against the baseline where greedy does not run). Methods run interleaved per prompt so machine drift
hits all alike.

Rows go to DIR/results.jsonl (eval/results.py), so an interrupted run resumes where it stopped; one prompt's
columns run in eval/bench_run.py (locally or in Ray workers, eval/ray_runner.py).
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from multidraft.errors import InvalidOptionError
from multidraft.eval import llama_cpp_peer
# Re-exported: the public names of `multidraft.eval.bench` from before the split.
from multidraft.eval.bench_methods import (PEER_OPTIONS, PEERS, PRESETS, SPD_K_VALUES,  # noqa: F401
                                           BenchMethod, resolve_methods)
from multidraft.eval.bench_run import (attention_implementation, load_models, output_perplexity,  # noqa: F401
                                       run_method, run_prompt, warm_up)
from multidraft.eval.results import (BASELINE, BASELINES, FORMAT, RESULTS_NAME, BenchConfigError, ResultsFile,  # noqa: F401
                                     _now, read_results)


# ---------------------------------------------------------------- configuration


@dataclass
class BenchConfig:
    model: str
    tasks: list[str] = field(default_factory=lambda: ["code_edit"])
    methods: list[str] = field(default_factory=lambda: ["all"])
    draft: Optional[str] = None
    max_new_tokens: int = 64
    limit: Optional[int] = 5
    seed: int = 0
    dtype: Optional[str] = None                       # None: the loader's default (fp32 here)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)   # method -> option overrides
    runner: str = "eager"                             # our methods' runner (models/runner.py); HF peers run stock
    device: Optional[str] = None                      # None: cuda when torch sees a GPU, else cpu
    draft_length: str = "adaptive"                    # decoders/draft_length.py DEFAULT_MODE; "fixed": papers'
    baseline: str = BASELINE                          # what speedups and equality are measured against (BASELINES)

    def identity(self) -> dict[str, Any]:
        """What the numbers of a row depend on. Tasks, methods and limit may change between resumed runs."""
        return {"format": FORMAT, "model": self.model, "draft": self.draft, "max_new_tokens": self.max_new_tokens,
                "seed": self.seed, "dtype": self.dtype or "auto", "options": self.options,
                **({"baseline": self.baseline} if self.baseline != BASELINE else {})}   # older folders stay resumable

    def validate(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise InvalidOptionError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise InvalidOptionError(f"limit must be a positive integer, got {self.limit!r}")
        if not self.tasks:
            raise InvalidOptionError("no tasks given; pass --tasks, e.g. --tasks code_edit,summarize")
        if self.baseline not in BASELINES:
            raise InvalidOptionError(f"unknown baseline {self.baseline!r}; choose from: {', '.join(BASELINES)}")


def environment() -> dict[str, Any]:
    import torch
    import transformers
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as handle:
            cpu = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "cpu": cpu, "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def load_prompts(tasks: list[str], limit: Optional[int]) -> dict[str, list]:
    from multidraft.eval.tasks import load_task
    return {task: load_task(task, limit=limit) for task in tasks}


def check_tasks(tasks: list[str]) -> None:
    from multidraft.eval.tasks import TASKS
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise InvalidOptionError(f"unknown task {', '.join(map(repr, unknown))}; choose from: {', '.join(TASKS)}")


def run_bench(config: BenchConfig, out_dir, prompts: Optional[dict[str, list]] = None, models=None,
              progress: bool = True, on_row: Optional[Callable[[dict], None]] = None,
              ray_address: Optional[str] = None, workers: int = 2, report: bool = True, overwrite: bool = False) -> Path:
    """Benchmark `config` into out_dir/results.jsonl (resuming it if compatible) and write the report.

    `prompts` ({task: [TaskPrompt]}) defaults to `load_task` for config.tasks; `models` is (lm, draft_lm) when the
    caller already loaded them; `on_row(row)` is called after each row is written. `overwrite` discards earlier
    results in out_dir instead of resuming them.
    """
    config.validate()
    methods, skipped = resolve_methods(config.methods, bool(config.draft), config.options, model=config.model,
                                      baseline=config.baseline)
    if prompts is None:
        check_tasks(config.tasks)
    out_dir = Path(out_dir)
    results = ResultsFile(out_dir / RESULTS_NAME)
    if overwrite and results.path.exists():
        results.path.unlink()
    header = {"kind": "header", "format": FORMAT, "identity": config.identity(), "config": asdict(config),
              "tasks": list(config.tasks), "methods": [asdict(m) for m in methods], "skipped": skipped,
              "created": _now(), "runs": [{"started": _now(), "mode": f"ray:{ray_address}" if ray_address else "local",
                                           "load_average": os.getloadavg()[0], "env": environment()}]}
    labels = {m.label for m in methods}
    # Failed rows of the methods asked for are run again (the failure may have been fixed since).
    rows = results.start(header, retry=lambda row: bool(row.get("error")) and row["method"] in labels
                         and row["task"] in config.tasks)    # refuses another configuration before any work
    if prompts is None:
        prompts = load_prompts(config.tasks, config.limit)
    else:
        prompts = {task: list(items)[: config.limit] for task, items in prompts.items() if task in config.tasks}
    done = {(r["task"], r["prompt_id"], r["method"]) for r in rows}
    references, greedy_references = ({(r["task"], r["prompt_id"]): [t["token_ids"] for t in r["turns"]]
                                      for r in rows if r["method"] == label and r.get("error") is None}
                                     for label in (config.baseline, "greedy"))
    work, total = [], 0
    for task in config.tasks:
        for item in prompts.get(task, []):
            wanted = [m for m in methods if m.applies_to(task)]
            total += len(wanted)
            todo = [m for m in wanted if (task, item.id, m.label) not in done]
            if todo:
                work.append((item, todo, references.get((task, item.id)), greedy_references.get((task, item.id))))
    if work:
        bar = _progress(total, total - sum(len(w[1]) for w in work), progress)
        try:
            for row in _execute(config, work, models, ray_address, workers):
                results.append(row)
                bar.update(1)
                bar.set_postfix_str(f"{row['task']} {row['method']}", refresh=False)
                if on_row is not None:
                    on_row(row)
        finally:
            bar.close()
    if report:
        from multidraft.eval.report import write_report
        write_report(out_dir)
    return out_dir / RESULTS_NAME


def _execute(config, work, models, ray_address, workers) -> Iterator[dict]:
    if ray_address:
        from multidraft.eval.ray_runner import run_with_ray
        for rows in run_with_ray(ray_address, workers, config, work):
            yield from rows
        return
    from multidraft.artifacts import Artifacts
    lm, draft_lm = models if models is not None else load_models(config)
    artifacts = Artifacts()          # this run's n-gram files, heads...: loaded once, outside the timed spans after warm-up
    every = list({m.label: m for _, todo, *_ in work for m in todo}.values())
    try:
        warm_up(lm, draft_lm, work[0][0], every, config, artifacts)
        for item, todo, reference, greedy_reference in work:
            yield from run_prompt(lm, draft_lm, item, todo, config, reference, artifacts, greedy_reference)
    finally:
        llama_cpp_peer.close_peers(lm)          # the peers' child processes end with the run


def _progress(total: int, initial: int, enabled: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, initial=initial, unit="run", desc="bench", disable=not enabled, dynamic_ncols=True)
