"""`multidraft bench`: every method and HF's own generate() on the same prompts, one row per prompt x method.

    from multidraft.eval.bench import BenchConfig, run_bench
    run_bench(BenchConfig(model="qwen2.5-coder-0.5b", tasks=["code_edit"], limit=3), out_dir="bench-out")

Methods come from the registry (`multidraft.methods.available_methods`), so a method that lands later is
benchmarked without code changes; PRESETS only says how to run some of them (options to sweep, tasks they apply
to). The baseline `hf_greedy` (HF `generate()`, greedy) always runs first on each prompt: speedups and the
equality check are measured against it. Methods run interleaved per prompt so machine drift hits all alike.

Rows go to DIR/results.jsonl: a header line (configuration, environment) then one JSON line per prompt x method,
each appended and fsynced as a whole line, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

from multidraft.errors import InvalidOptionError, MultidraftError, UnknownMethodError

FORMAT = 1
RESULTS_NAME = "results.jsonl"
BASELINE = "hf_greedy"
# Option names a superposed decoder may use for its number of drafts k (the first one it declares is swept).
SPD_K_OPTIONS = ("num_drafts", "k", "num_superposed")
SPD_K_VALUES = (2, 3, 4, 8)


class BenchConfigError(MultidraftError, ValueError):
    """A bench output folder that holds results of another configuration, or a file that is not bench results."""


# ---------------------------------------------------------------- what to run

# How to run registry methods in a benchmark. Keys: "variants" (list of option dicts, one row each),
# "temperature", "tasks" (tuple: only these tasks), "sweep_k" (superposed: sweep k over SPD_K_VALUES),
# "attention" (options -> the attention implementation the target needs, e.g. "eager" to return weights).
PRESETS: dict[str, dict[str, Any]] = {
    "sample": {"temperature": 1.0},
    # MTAD's joint-ratio test is about sampling: at temperature 0 both laws are one-hot and it is greedy
    # matching, so it runs sampled, beside `sample`, and its perplexity is the number to compare.
    "mtad": {"temperature": 1.0},
    # PLD+(a) runs on the default kernel too: the runner computes the heads' rows from queries and keys.
    "pld_plus": {"variants": [{"rank_by": "hidden"}, {"rank_by": "attention"}]},
    "superposed": {"tasks": ("autocomplete",), "sweep_k": True},
}
# HF generate() peers: name -> (needs a draft model, description).
PEERS: dict[str, tuple[bool, str]] = {
    "hf_greedy": (False, "HF generate(), greedy (the baseline)"),
    "hf_prompt_lookup": (False, "HF generate(prompt_lookup_num_tokens=k)"),
    "hf_assisted": (True, "HF generate(assistant_model=draft)"),
}


@dataclass
class BenchMethod:
    """One column of the benchmark: a registry method (or HF peer) with fixed options."""

    label: str                       # unique row key, e.g. "pld_plus[rank_by=attention]"
    name: str                        # registry name or HF peer name
    peer: bool = False
    lossless: bool = True
    options: dict[str, Any] = field(default_factory=dict)
    temperature: Optional[float] = None
    tasks: Optional[tuple[str, ...]] = None   # None: every task
    needs_draft: bool = False
    attention: Optional[str] = None           # attention implementation to switch the target to for this method

    def applies_to(self, task: str) -> bool:
        return self.tasks is None or task in self.tasks

    @property
    def sampled(self) -> bool:
        return bool(self.temperature)


def _label(name: str, variant: dict[str, Any]) -> str:
    return name + ("[" + ",".join(f"{k}={v}" for k, v in variant.items()) + "]" if variant else "")


def _expand(name: str, spec, overrides: dict[str, Any]) -> list[BenchMethod]:
    preset = PRESETS.get(name, {})
    variants = list(preset.get("variants", [{}]))
    if preset.get("sweep_k"):
        key = next((k for k in SPD_K_OPTIONS if k in spec.options), None)
        variants = [{key: k} for k in SPD_K_VALUES] if key else [{}]
    if any(key in overrides for variant in variants for key in variant):
        variants = [{}]          # the user fixed the swept option: one column
    needs_draft = "draft_model" in spec.options and spec.options.get("draft_model") is None
    methods = []
    for variant in variants:
        options = spec.resolve_options({**variant, **overrides})   # InvalidOptionError on unknown options
        options = {k: v for k, v in options.items() if k != "draft_model"}
        attention = preset["attention"](options) if "attention" in preset else None
        methods.append(BenchMethod(_label(name, variant), name, False, bool(spec.lossless), options,
                                   preset.get("temperature"), preset.get("tasks"), needs_draft, attention))
    return methods


# generate() keyword arguments a peer accepts through -o (HF's defaults otherwise, i.e. what users get).
PEER_OPTIONS = {"hf_greedy": (), "hf_prompt_lookup": ("prompt_lookup_num_tokens", "max_matching_ngram_size"),
                "hf_assisted": ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")}


def _peer(name: str, overrides: dict[str, Any], registry) -> BenchMethod:
    options: dict[str, Any] = {}
    if name == "hf_prompt_lookup":      # HF has no default; use pld's draft length so the two compare like for like
        pld = registry.get("pld")
        options["prompt_lookup_num_tokens"] = pld.options.get("num_draft_tokens", 10) if pld else 10
    unknown = sorted(set(overrides) - set(PEER_OPTIONS[name]))
    if unknown:
        raise InvalidOptionError(f"{name} has no option {', '.join(map(repr, unknown))}; its options are: "
                                 f"{', '.join(PEER_OPTIONS[name]) or 'none'}")
    options.update(overrides)
    return BenchMethod(name, name, True, True, options, None, None, PEERS[name][0])


def resolve_methods(requested: Iterable[str], has_draft: bool, overrides: Optional[dict[str, dict]] = None
                    ) -> tuple[list[BenchMethod], dict[str, str]]:
    """The methods to run, baseline first, and {name: reason} for those skipped.

    `requested` holds registry or peer names, or "all". A method that needs a draft model without one is an error
    when named, and skipped under "all".
    """
    from multidraft.methods import available_methods

    registry = available_methods()
    overrides = dict(overrides or {})
    requested = [r.strip() for r in requested if r.strip()]
    if not requested:
        raise InvalidOptionError("no methods given; pass --methods all or a comma-separated list")
    everything = "all" in requested
    names = list(registry) + list(PEERS) if everything else list(dict.fromkeys(requested))
    for name in names + list(overrides):
        if name != "all" and name not in registry and name not in PEERS:
            raise UnknownMethodError(f"unknown method {name!r}; choose from: all, "
                                     f"{', '.join(sorted(registry) + list(PEERS))}")
    for name in overrides:
        if name not in names and name != BASELINE:
            raise InvalidOptionError(f"options given for {name!r}, which is not among the methods benchmarked")
    names = [BASELINE] + [n for n in names if n not in (BASELINE, "all")]
    methods: list[BenchMethod] = []
    skipped: dict[str, str] = {}
    for name in names:
        expanded = ([_peer(name, overrides.get(name, {}), registry)] if name in PEERS
                    else _expand(name, registry[name], overrides.get(name, {})))
        if expanded[0].needs_draft and not has_draft:
            if not everything:
                raise InvalidOptionError(f"method {name!r} needs a draft model; pass --draft ALIAS "
                                         f"(a smaller model with the same tokenizer, e.g. qwen2.5-coder-0.5b)")
            skipped[name] = "needs --draft"
            continue
        methods.extend(expanded)
    return methods, skipped


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
    device: Optional[str] = None                      # None: cuda when torch sees a GPU, else cpu

    def identity(self) -> dict[str, Any]:
        """What the numbers of a row depend on. Tasks, methods and limit may change between resumed runs."""
        return {"format": FORMAT, "model": self.model, "draft": self.draft, "max_new_tokens": self.max_new_tokens,
                "seed": self.seed, "dtype": self.dtype or "auto", "options": self.options}

    def validate(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise InvalidOptionError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise InvalidOptionError(f"limit must be a positive integer, got {self.limit!r}")
        if not self.tasks:
            raise InvalidOptionError("no tasks given; pass --tasks, e.g. --tasks code_edit,summarize")


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


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- results file


def _parse_lines(data: bytes, path: Path) -> list[dict]:
    """Complete JSON lines of a results file; a truncated last line (no newline) is dropped."""
    lines = data.split(b"\n")[:-1]        # the piece after the last newline is empty or a partial line
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            raise BenchConfigError(f"{path} line {number} is not valid JSON; the file was edited or corrupted "
                                   f"(delete that line to resume)") from None
    return records


def read_results(path) -> tuple[dict, list[dict]]:
    """(header, rows) of a results.jsonl. Raises BenchConfigError when it is not a bench results file."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_NAME
    if not path.exists():
        raise BenchConfigError(f"no bench results at {path}; run `multidraft bench --out {path.parent}` first")
    records = _parse_lines(path.read_bytes(), path)
    if not records or records[0].get("kind") != "header":
        raise BenchConfigError(f"{path} is not a multidraft bench results file (no header line)")
    return records[0], [r for r in records[1:] if r.get("kind") == "row"]


class ResultsFile:
    """results.jsonl: a header line, then rows appended one complete line at a time (write + flush + fsync)."""

    def __init__(self, path):
        self.path = Path(path)

    def start(self, header: dict, retry: Callable[[dict], bool] = lambda row: False) -> list[dict]:
        """Check an existing file is compatible, then rewrite it as the new header plus its complete rows.

        The rewrite (temporary file + rename) also drops a line cut short by an interruption, and the rows for which
        `retry(row)` is true (they will be run again). Returns the rows kept.
        """
        rows: list[dict] = []
        if self.path.exists() and self.path.stat().st_size:
            old, rows = read_results(self.path)
            if old.get("identity") != header["identity"]:
                diff = {k: (old.get("identity", {}).get(k), v) for k, v in header["identity"].items()
                        if old.get("identity", {}).get(k) != v}
                described = "; ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in diff.items())
                raise BenchConfigError(f"{self.path.parent} holds results of another configuration ({described}); "
                                       f"use another --out folder, or the same settings to resume")
            header = {**header, "created": old.get("created", header["created"]),
                      "runs": old.get("runs", []) + header["runs"],
                      "methods": _merge_by(old.get("methods", []), header["methods"], "label"),
                      "tasks": list(dict.fromkeys(old.get("tasks", []) + header["tasks"]))}
            rows = [row for row in rows if not retry(row)]
        self.header = header
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "w") as handle:
            for record in [header] + rows:
                handle.write(json.dumps(record, default=str) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        return rows

    def append(self, row: dict) -> None:
        line = (json.dumps(row, default=str) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)          # one write of a whole line; a crash leaves at most a partial last line
            os.fsync(fd)
        finally:
            os.close(fd)


def _merge_by(old: list[dict], new: list[dict], key: str) -> list[dict]:
    merged = {item[key]: item for item in old}
    merged.update({item[key]: item for item in new})
    return list(merged.values())


# ---------------------------------------------------------------- running one prompt


def merge_stats(turns: list[dict]) -> dict:
    """Pool the DecodeStats dicts of several turns; derived ratios are recomputed from the pooled counts."""
    if len(turns) == 1:
        return turns[0]
    out: dict[str, Any] = {"method": turns[0]["method"], "lossless": turns[0]["lossless"]}
    for key in ("prompt_tokens", "generated_tokens", "target_calls", "verification_calls", "draft_calls",
                "draft_tokens_proposed", "draft_tokens_accepted", "prefill_time", "draft_time", "verify_time",
                "total_time", "overhead_time"):
        out[key] = sum(t.get(key, 0) for t in turns)
    for key in ("proposed_per_position", "accepted_per_position"):
        width = max(len(t.get(key, [])) for t in turns)
        out[key] = [sum(t.get(key, [])[i] if i < len(t.get(key, [])) else 0 for t in turns) for i in range(width)]
    histogram: dict[str, int] = {}
    for t in turns:
        for k, v in t.get("acceptance_histogram", {}).items():
            histogram[k] = histogram.get(k, 0) + v
    out["acceptance_histogram"] = dict(sorted(histogram.items(), key=lambda kv: int(kv[0])))
    out["stop_reason"] = turns[-1].get("stop_reason", "")
    calls, tokens = out["verification_calls"], out["generated_tokens"]
    out["mean_acceptance_length"] = tokens / calls if calls else 0.0
    out["acceptance_rate"] = (out["draft_tokens_accepted"] / out["draft_tokens_proposed"]
                              if out["draft_tokens_proposed"] else 0.0)
    out["tokens_per_second"] = tokens / out["total_time"] if out["total_time"] else 0.0
    out["per_position_acceptance"] = [a / p if p else 0.0 for a, p in
                                      zip(out["accepted_per_position"], out["proposed_per_position"])]
    return out


def output_perplexity(lm, prompt_ids: list[int], token_ids: list[int]) -> Optional[float]:
    """Perplexity of the generated tokens given the prompt under the target model (metrics.draft_perplexities)."""
    from multidraft.eval.metrics import draft_perplexities
    return draft_perplexities(lm, prompt_ids, [token_ids])[0] if token_ids else None


def _hf_generate(lm, draft_lm, method: BenchMethod, prompt_ids: list[int], max_new_tokens: int):
    import torch
    kwargs = dict(method.options)
    if method.name == "hf_assisted":
        kwargs["assistant_model"] = draft_lm.model
    pad = lm.tokenizer.pad_token_id
    pad = pad if pad is not None else min(lm.eos_token_ids, default=0)
    input_ids = torch.tensor([prompt_ids], device=lm.device)
    with torch.inference_mode():
        out = lm.model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                                max_new_tokens=max_new_tokens, pad_token_id=pad, repetition_penalty=1.0, **kwargs)
    return out[0, len(prompt_ids):].tolist()


@contextlib.contextmanager
def attention_implementation(lm, name: Optional[str]):
    """Switch the target's attention kernel (same weights) for one method, e.g. to "eager" for attention weights."""
    previous = lm.attn_implementation
    if name is None or name == previous:
        yield
        return
    lm.model.set_attn_implementation(name)
    try:
        yield
    finally:
        lm.model.set_attn_implementation(previous)


def run_method(lm, draft_lm, item, method: BenchMethod, config: BenchConfig, quality: bool = False) -> dict:
    """Run one method on every turn of one prompt (later turns see this method's own earlier answers)."""
    with attention_implementation(lm, method.attention):
        return _run_turns(lm, draft_lm, item, method, config, quality)


def _run_turns(lm, draft_lm, item, method: BenchMethod, config: BenchConfig, quality: bool) -> dict:
    import multidraft
    answers: list[str] = []
    turns: list[dict] = []
    for turn in range(item.num_turns):
        prompt = item.input if turn == 0 else item.turn_messages(turn, answers)
        prompt_ids = lm.encode(prompt)
        stats = drafts = None
        start = time.perf_counter()
        if method.peer:
            token_ids = _hf_generate(lm, draft_lm, method, prompt_ids, config.max_new_tokens)
            seconds = time.perf_counter() - start
            text = lm.decode(token_ids)
        else:
            options = dict(method.options)
            if method.needs_draft:
                options["draft_model"] = draft_lm
            gen = multidraft.generate(lm, prompt_ids, method=method.name, max_new_tokens=config.max_new_tokens,
                                      temperature=method.temperature, seed=config.seed, **options)
            seconds = time.perf_counter() - start
            token_ids, text, stats = list(gen.token_ids), gen.text, gen.stats.to_dict()
            if gen.drafts:
                drafts = [{"text": d.text, "token_ids": list(d.token_ids), "score": d.score} for d in gen.drafts]
        record = {"prompt_tokens": len(prompt_ids), "tokens": len(token_ids), "seconds": seconds,
                  "token_ids": token_ids, "text": text, "stats": stats, "drafts": drafts}
        if quality:
            record["perplexity"] = output_perplexity(lm, prompt_ids, token_ids)
            if drafts:
                from multidraft.eval.metrics import best_of_k, draft_perplexities
                scores = draft_perplexities(lm, prompt_ids, [d["token_ids"] for d in drafts])
                for draft, score in zip(drafts, scores):
                    draft["perplexity"] = score
                record["best_of_k_perplexity"] = best_of_k(scores)
        turns.append(record)
        answers.append(text)
    tokens = sum(t["tokens"] for t in turns)
    seconds = sum(t["seconds"] for t in turns)
    stats_list = [t["stats"] for t in turns if t["stats"] is not None]
    ppl = [t["perplexity"] for t in turns if t.get("perplexity") is not None]
    return {"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds if seconds else 0.0,
            "stats": merge_stats(stats_list) if stats_list else None, "turns": turns,
            "output": turns[-1]["text"], "perplexity": sum(ppl) / len(ppl) if ppl else None}


def _needs_quality(method: BenchMethod) -> bool:
    # Lossless greedy-time outputs equal the baseline's, so their perplexity adds nothing.
    return method.name == BASELINE or not method.lossless or method.sampled


def run_prompt(lm, draft_lm, item, methods: list[BenchMethod], config: BenchConfig,
               reference: Optional[list[list[int]]] = None) -> Iterator[dict]:
    """Yield one row per method for `item`; `reference` is the baseline's per-turn token ids if already known."""
    for method in methods:
        row = {"kind": "row", "task": item.task, "prompt_id": item.id, "method": method.label, "name": method.name,
               "peer": method.peer, "lossless": method.lossless, "temperature": method.temperature or 0.0,
               "options": method.options, "error": None, "load_average": os.getloadavg()[0],
               "dtype": str(lm.dtype).removeprefix("torch."), "device": str(lm.device)}
        try:
            row.update(run_method(lm, draft_lm, item, method, config, quality=_needs_quality(method)))
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:        # a failing method is reported, not fatal for the other columns
            row["error"] = f"{type(exc).__name__}: {exc}"
        if method.name == BASELINE and row["error"] is None:
            reference = [t["token_ids"] for t in row["turns"]]
        row["equal_greedy"] = _equal(row, reference, method)
        yield row


def _equal(row: dict, reference, method: BenchMethod) -> Optional[bool]:
    if row["error"] is not None or reference is None or method.sampled:
        return None
    return [t["token_ids"] for t in row["turns"]] == reference


def warm_up(lm, draft_lm, item, methods: list[BenchMethod], config: BenchConfig) -> None:
    """A few tokens of every method on a short prefix of a real prompt (first-call costs: kernels, caches)."""
    from dataclasses import replace
    from types import SimpleNamespace
    prefix = SimpleNamespace(task=item.task, id=item.id, input=lm.encode(item.input)[:32], num_turns=1)
    for _ in run_prompt(lm, draft_lm, prefix, methods, replace(config, max_new_tokens=min(4, config.max_new_tokens))):
        pass


# ---------------------------------------------------------------- the whole run


def load_models(config: BenchConfig):
    import multidraft
    lm = multidraft.load_model(config.model, dtype=config.dtype, device=config.device)
    draft_lm = multidraft.load_model(config.draft, dtype=config.dtype, device=config.device) if config.draft else None
    return lm, draft_lm


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
    methods, skipped = resolve_methods(config.methods, bool(config.draft), config.options)
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
    references = {(r["task"], r["prompt_id"]): [t["token_ids"] for t in r["turns"]]
                  for r in rows if r["method"] == BASELINE and r.get("error") is None}
    work, total = [], 0
    for task in config.tasks:
        for item in prompts.get(task, []):
            wanted = [m for m in methods if m.applies_to(task)]
            total += len(wanted)
            todo = [m for m in wanted if (task, item.id, m.label) not in done]
            if todo:
                work.append((item, todo, references.get((task, item.id))))
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
    lm, draft_lm = models if models is not None else load_models(config)
    every = list({m.label: m for _, todo, _ in work for m in todo}.values())
    warm_up(lm, draft_lm, work[0][0], every, config)
    for item, todo, reference in work:
        yield from run_prompt(lm, draft_lm, item, todo, config, reference)


def _progress(total: int, initial: int, enabled: bool):
    from tqdm.auto import tqdm
    return tqdm(total=total, initial=initial, unit="run", desc="bench", disable=not enabled, dynamic_ncols=True)
