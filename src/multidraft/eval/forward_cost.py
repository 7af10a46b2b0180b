"""`multidraft bench forward-cost`: how much a forward of n new tokens costs relative to one, per model, runner and
instruction-set path of the 8-bit kernels: the number that decides whether drafting can pay on a machine (a
drafted step costs one n-token forward plus the drafting).

    multidraft bench forward-cost --model qwen2.5-coder-1.5b               # the runner load_model picks (native)
    multidraft bench forward-cost --model qwen2.5-coder-1.5b --runners native,quantized-q8 --isa all --json cost.json
    multidraft bench forward-cost --model qwen2.5-coder-1.5b --dtype float32 --runners eager,fast
    multidraft bench forward-cost --random qwen2.5-1.5b --layers 4 --runners eager,fast
    multidraft bench forward-cost --linear --threads 1     # one layer's linears, M = 1..16

After a 300-token prefill, each shape (a chain of n new tokens, n in --chains; or a tree: `k x d` = k branches
of depth d under one root) is timed --reps times per runner, runners interleaved shape by shape so machine
drift hits them alike; the cache is cropped back each time. Prints the minimum and its ratio to the same
runner's 1-token forward, where each of those forwards' time went (the kernels' own clocks: the GGUF linears, the
attention, the layers' elementwise steps, the rest), the machine's read bandwidth and each 1-token forward's share of
it. The machine's load (uptime) is printed beside the figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from typing import Optional

import torch

import multidraft
from multidraft.errors import InvalidOptionError
from multidraft.models.threads import check_thread_count
from multidraft.fsutil import atomic_path, check_output_file
from multidraft.models.runner import LM
from multidraft.models.runner_choice import GGUF_RUNNERS
Q8_RUNNERS = ("quantized-q8", "native")                  # the runners an --isa path applies to


def random_model(shape: str, layers: int, dtype: str = "float32", device: str = "cpu") -> LM:
    """A random-weight model of a known shape (no download)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    if shape != "qwen2.5-1.5b":
        raise InvalidOptionError(f"unknown --random shape {shape!r}; known: qwen2.5-1.5b")
    config = Qwen2Config(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=layers,
                         num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
                         tie_word_embeddings=True, rope_theta=1000000.0, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(device=device, dtype=getattr(torch, dtype)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(multidraft.models.loader.resolve("smollm2-135m").path))
    return LM(model, tokenizer, name=f"random-{shape}-{layers}L")


def tree_parents(branches: int, depth: int) -> list[int]:
    parents = [-1]
    for _ in range(branches):
        previous = 0
        for _ in range(depth):
            parents.append(previous)
            previous = len(parents) - 1
    return parents


def clock(cpu_time: bool):
    """Wall time, or this process's CPU time: on a machine shared with other busy processes the CPU time of a
    one-thread run is what the work costs (wall time also counts the waits for a core)."""
    return time.process_time if cpu_time else time.perf_counter


def resolve_auto(runners: list[str], args) -> tuple[list[str], Optional[LM]]:
    """--runners' "auto" (the default) as the runner `load_model` picks for this model here (native for a GGUF
    model of a native architecture on a CPU), so the default figures are those of what users run; with --random,
    eager and fast. -> (the runners, the model loaded to find out; None with --random)."""
    if args.random:
        named = ["eager", "fast"]
        auto_lm = None
    else:
        auto_lm = multidraft.load_model(args.model, dtype=args.dtype, device=args.device)
        named = [auto_lm.runner]
        print(f"auto: the {auto_lm.runner} runner (what load_model picks for {args.model} here)", flush=True)
    resolved = []
    for runner in runners:
        resolved += [r for r in (named if runner == "auto" else [runner]) if r not in resolved]
    return resolved, auto_lm


def runner_views(lm: Optional[LM], runners: list[str], model: Optional[str], dtype: str,
                 loaded: Optional[dict] = None) -> dict:
    """One LM per runner, each with its own cache: the HF runners share one HF model (eager first: setting a
    runner up (un)installs the CPU kernel on the shared modules, used only inside each LM's own `kernels()`
    context); each quantized runner is its own model (the GGUF's blocks), loaded on its --isa path: the matrices
    are packed at load for the path that will run them (a layout packed for one path is read slowly on another).
    `loaded`: GGUF runners' models already loaded on the path chosen at load, by runner name."""
    views = {}
    for runner in sorted(runners, key=lambda r: r != "eager"):
        if loaded and runner in loaded:
            views[runner] = loaded[runner]
        elif is_gguf_runner(runner):            # quantized, quantized-q8, native: each its own model (mapped blocks)
            with isa_of(runner):
                views[runner] = multidraft.load_model(model, runner=runner.split("@")[0])
        else:
            if lm is None:
                lm = multidraft.load_model(model, dtype=dtype, runner="eager")
            views[runner] = LM(lm.model, lm.tokenizer, name=lm.name, runner=runner)
    return views


def is_gguf_runner(runner: str) -> bool:
    """A runner over the GGUF's blocks (its own model), not HF's weights."""
    return runner.split("@")[0] in GGUF_RUNNERS


class ReadProbe:
    """The machine's read bandwidth: one streaming read (a sum over a buffer far larger than the caches) per call."""

    def __init__(self, megabytes: int = 1024):
        self.buffer = torch.ones(megabytes * 2 ** 20 // 4)
        self.buffer.sum()

    def gbps(self) -> float:
        start = time.perf_counter()
        self.buffer.sum()
        return self.buffer.numel() * 4 / (time.perf_counter() - start) / 1e9


def weight_bytes_per_token(lm: LM) -> int:
    """Bytes of weights one forward streams: every linear's matrix once (the quantized runners: the blocks their
    kernels read, Q4_K's packed copy with 8-bit activations; the embedding lookup reads a few rows only)."""
    total = 0
    for module in lm.model.modules():
        if isinstance(module, torch.nn.Linear):
            matrix = getattr(module, "gguf_matrix", None)
            if matrix is None:
                total += module.weight.numel() * module.weight.element_size()
            else:
                total += matrix.streamed_bytes if module.gguf_mode.activations == "q8" else matrix.nbytes
    return total


def tokens(view, start: int, count: int) -> list[int]:
    """`count` token ids from `start` on, within the model's vocabulary."""
    vocab = int(getattr(view.model.config, "vocab_size", 0) or 1 << 30)
    return [(start + i) % vocab for i in range(count)]


def time_shapes(views: dict, runners: list[str], shapes: list[tuple[str, list[int]]], reps: int,
                cpu_time: bool = False, prefix: int = 300) -> tuple[dict, dict]:
    """-> (best, split): per runner and shape label, the fastest counted forward in seconds, and where that forward's
    wall time went (forward_split; None under --cpu-time, whose clock is not the stage clocks')."""
    now = clock(cpu_time)
    caches = {}
    for runner, view in views.items():
        caches[runner] = view.new_cache()
        with isa_of(runner):
            view.forward(caches[runner], tokens(view, 1000, prefix), logits_rows=slice(-1, None))
    times: dict = {runner: {label: [] for label, _ in shapes} for runner in runners}
    # Round-robin, every shape once per round (the first round warms them up): a ratio to the 1-row forward then
    # compares minima taken over the same minutes, so a slow spell of a shared machine hits every shape alike instead
    # of the one block of reps it fell on. (What it cannot remove: a VM whose memory bandwidth differs from one run
    # to the next moves the 1-row forward, and so every ratio, run to run.) Runners take turns within a round; a
    # switch of kernel path (--isa) runs that path's self-check, so one untimed forward follows it.
    for _ in range(reps + 1):
        for runner in runners:
            view, cache = views[runner], caches[runner]
            with isa_of(runner):
                if "@" in runner:              # isa_of switched the path: one runner alone too
                    _time_once(view, cache, [-1], now, prefix)
                for label, parents in shapes:
                    times[runner][label].append(_time_once(view, cache, parents, now, prefix))
    for runner, view in views.items():
        if view.runner != runner.split("@")[0]:
            print(f"note: runner {runner!r} ran as {view.runner!r} here")
    fastest = {runner: {label: min(spans[1:], key=lambda span: span[0]) for label, spans in by_label.items()}
               for runner, by_label in times.items()}
    best = {runner: {label: span[0] for label, span in by_label.items()} for runner, by_label in fastest.items()}
    split = {runner: {label: None if cpu_time else forward_split(*span) for label, span in by_label.items()}
             for runner, by_label in fastest.items()}
    return best, split


def forward_split(total: float, stages: dict) -> Optional[dict]:
    """Where one forward's `total` seconds went, from the kernels' stage clocks (stage_timer): seconds in the GGUF
    linears, the attention, the layers' elementwise steps, and the rest (Python, the embedding, torch's small ops,
    the logits' rows); None where no GGUF linear ran (an HF runner)."""
    if not stages.get("linears"):
        return None
    return {"linears": stages["linears"], "attention": stages["attention"], "layer_steps": stages["layer steps"],
            "other": total - stages["linears"] - stages["attention"] - stages["layer steps"]}


def _time_once(view, cache, parents: list[int], now, prefix: int) -> tuple[float, dict]:
    """One forward of `parents`' new tokens after `prefix` cached ones: (seconds, the kernels' stage clocks in
    seconds: stage_timer); the cache is cropped back."""
    with stage_timer() as stages:
        start = now()
        view.forward(cache, tokens(view, 2000, len(parents)), parents=parents)
        if view.device.type == "cuda":
            torch.cuda.synchronize()
        spent = now() - start
    cache.crop(prefix)
    return spent, stages


@contextlib.contextmanager
def isa_of(runner: str):
    """Inside: the 8-bit kernels on the path a runner label names ("quantized-q8@avx-vnni"); others as they are."""
    from multidraft.models import gguf_kernels
    if "@" not in runner:
        yield
        return
    if not gguf_kernels.load(progress=False):
        raise InvalidOptionError(f"--isa needs the quantized CPU kernels: {gguf_kernels.unavailable_reason()}")
    before = gguf_kernels.isa()
    gguf_kernels.use_isa(runner.split("@")[1], "--isa ")
    try:
        yield
    finally:
        gguf_kernels.use_isa(before)


@contextlib.contextmanager
def stage_timer():
    """Inside: the kernel ops timed by stage where they run (in C++, so the ops the fused decoder layers call count
    too: the linears, the attention, the layers' elementwise steps); yields a dict of seconds per stage, filled on
    exit."""
    from multidraft.models import gguf_kernels
    spent: dict = {}
    if not hasattr(torch.ops.multidraft_gguf, "stage_times"):    # the kernels never loaded (HF runners only)
        yield spent
        spent.update({"linears": 0.0, "attention": 0.0, "layer steps": 0.0})
        return
    gguf_kernels.stage_times(True)
    try:
        yield spent
    finally:
        spent.update({stage: ns / 1e9 for stage, ns in gguf_kernels.stage_times(False).items()})


def bandwidth_pairs(view, runner: str, streamed: int, probe: ReadProbe, rounds: int, prefix: int = 300) -> dict:
    """A 1-token forward's share of the read bandwidth, the two measured in the same minutes: per round one probe,
    then the best of three forwards (a shared VM's bandwidth moves 2x from one second to the next, so one probe
    taken before the forwards made the share a coin toss). -> read_bandwidth_gbps (the best probe), bandwidth_share
    (the best forward against the best probe) and bandwidth_share_pair_median (each round's forward against its own
    probe, the median); streamed: the bytes of weights the forward reads (weight_bytes_per_token)."""
    cache = view.new_cache()
    probes, forwards = [], []
    with isa_of(runner):
        view.forward(cache, tokens(view, 1000, prefix), logits_rows=slice(-1, None))
        for _ in range(max(rounds, 1)):
            probes.append(probe.gbps() * 1e9)
            times = []
            for _ in range(3):
                start = time.perf_counter()
                view.forward(cache, tokens(view, 2000, 1))
                times.append(time.perf_counter() - start)
                cache.crop(prefix)
            forwards.append(min(times))
    return {"read_bandwidth_gbps": max(probes) / 1e9,
            "bandwidth_share": streamed / min(forwards) / max(probes),
            "bandwidth_share_pair_median": statistics.median(streamed / t / b for t, b in zip(forwards, probes))}


def linear_curve(threads: int, reps: int, cpu_time: bool = False) -> None:
    from multidraft.models import fast_linear

    now = clock(cpu_time)
    kernel = fast_linear.load_kernel()
    for n_out, n_in in ((8960, 1536), (1536, 8960), (1536, 1536), (256, 1536)):
        weight = torch.randn(n_out, n_in)
        rows = {}
        for m in (1, 2, 4, 8, 16):
            x = torch.randn(m, n_in)
            for name, fn in (("F.linear", lambda: torch.nn.functional.linear(x, weight)),
                             ("oneDNN", lambda: torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")),
                             ("fast", lambda: kernel(x, weight))):
                for _ in range(3):
                    fn()
                times = []
                for _ in range(reps):
                    start = now()
                    fn()
                    times.append(now() - start)
                rows.setdefault(name, {})[m] = min(times) * 1000
        for name, by_m in rows.items():
            print(f"{n_out}x{n_in} {name:8s} threads={threads} " + "  ".join(
                f"M={m}: {v:.2f}ms ({v / by_m[1]:.2f}x)" for m, v in by_m.items()), flush=True)


def runner_labels(runners: list[str], isa: str) -> list[str]:
    """The runners to time: quantized-q8 once per requested path ("quantized-q8@avx2"), the others once."""
    from multidraft.models import gguf_kernels
    if not isa:
        return runners
    if isa == "all":
        gguf_kernels.load(progress=False)
        paths = [p for p in gguf_kernels.ISA_PATHS if p != "scalar" and not gguf_kernels.missing_flag(p)]
    else:
        paths = [p.strip() for p in isa.split(",") if p.strip()]
    labels = []
    for runner in runners:
        labels += [f"{runner}@{p}" for p in paths] if runner in Q8_RUNNERS else [runner]
    return labels


def check_args(args) -> None:
    """The numbers and names a run needs, refused before any model loads or any timing."""
    check_thread_count(args.threads, auto=False)
    for name, low in (("reps", 1), ("prefix", 0), ("layers", 1)):
        value = getattr(args, name)
        if value < low:
            raise InvalidOptionError(f"--{name} must be an integer >= {low}, got {value}")
    if args.dtype not in ("float32", "bfloat16", "float16"):
        raise InvalidOptionError(f"--dtype must be float32, bfloat16 or float16, got {args.dtype!r}")
    if args.json:
        check_output_file(args.json, "--json")


def run(args) -> int:
    check_args(args)
    torch.set_num_threads(args.threads)
    print("load:", os.popen("uptime").read().strip(), flush=True)
    if args.linear:
        linear_curve(args.threads, max(args.reps, 10), args.cpu_time)
        return 0
    if not args.model and not args.random:
        raise InvalidOptionError("bench forward-cost needs --model NAME or --random SHAPE (or --linear)")
    asked = [r.strip() for r in args.runners.split(",") if r.strip()]
    shapes = forward_shapes(args.chains, args.trees)          # checked before a model loads
    if args.random and any(is_gguf_runner(r) for r in asked):
        raise InvalidOptionError("--random builds HF-format random weights, which only the eager and fast runners "
                                 "run; use --runners eager,fast (the GGUF runners need --model)")
    lm, loaded = None, {}
    if args.random:
        lm = random_model(args.random, args.layers, args.dtype, args.device or "cpu")
    if "auto" in asked:
        asked, auto_lm = resolve_auto(asked, args)
        if auto_lm is not None and not is_gguf_runner(auto_lm.runner):
            lm = auto_lm                                      # the HF runners share its model
        elif auto_lm is not None and not args.isa:
            loaded[auto_lm.runner] = auto_lm                  # timed as loaded (an --isa path loads its own)
        del auto_lm
    runners = runner_labels(asked, args.isa)
    if lm is None and not all(is_gguf_runner(r) for r in runners):
        lm = multidraft.load_model(args.model, dtype=args.dtype, device=args.device, runner="eager")
    views = runner_views(lm, runners, args.model, args.dtype, loaded)
    best, split = time_shapes(views, runners, shapes, args.reps, args.cpu_time, args.prefix)
    probe = None if args.no_bandwidth else ReadProbe()
    figures = summarize(views, runners, shapes, best, split, probe, args)
    print_table(runners, shapes, best, split, figures, args)
    if args.json:
        with atomic_path(args.json) as target:                # never a half-written file
            target.write_text(json.dumps(figures, indent=1))
        print(f"figures: {args.json}")
    print("load:", os.popen("uptime").read().strip(), flush=True)
    return 0


MAX_SHAPE_TOKENS = 1024


def forward_shapes(chains: str, trees: str) -> list:
    """(label, parents) per shape: a chain of n new tokens per --chains value, a k x d tree per --trees value, and
    the 1-token chain every ratio is taken against; InvalidOptionError naming the bad value otherwise."""
    shapes = []
    for value in filter(None, (v.strip() for v in chains.split(","))):
        if not value.isdigit() or int(value) < 1:
            raise InvalidOptionError(f"--chains takes positive token counts like 1,2,4,8 (got {value!r})")
        shapes.append((f"chain {int(value)}", list(range(-1, int(value) - 1))))
    for value in filter(None, (v.strip() for v in trees.split(","))):
        parts = value.lower().split("x")
        if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise InvalidOptionError(f"--trees takes k x d shapes like 2x4,4x4 (k branches of depth d; got {value!r}); "
                                     "pass --trees '' for none")
        k, d = int(parts[0]), int(parts[1])
        shapes.append((f"tree {k}x{d} ({len(tree_parents(k, d))} nodes)", tree_parents(k, d)))
    if "chain 1" not in [label for label, _ in shapes]:
        shapes.insert(0, ("chain 1", [-1]))
    too_big = [label for label, parents in shapes if len(parents) > MAX_SHAPE_TOKENS]
    if too_big:
        raise InvalidOptionError(f"a timed forward takes at most {MAX_SHAPE_TOKENS} new tokens (a prefill's size); "
                                 f"got {too_big[0]}: lower --chains or --trees")
    return shapes


def summarize(views: dict, runners: list[str], shapes, best: dict, split: dict, probe: Optional[ReadProbe],
              args) -> dict:
    """The --json figures: per runner its rows (chains) and trees in ms, each with where its time went (ms in the
    linears, the attention, the layer steps and the rest: forward_split), its 1-token forward's share of the read
    bandwidth (measured beside it: bandwidth_pairs) and outside_linears_share with where that time goes."""
    first = next(iter(views.values()))
    out = {"model": first.name, "dtype": args.dtype, "threads": args.threads, "cpu_time": args.cpu_time,
           "read_bandwidth_gbps": None, "load": os.popen("uptime").read().strip(), "runners": {}}
    for runner in runners:
        one = best[runner]["chain 1"]
        entry = {"rows": {}, "trees": {}, "weight_bytes": weight_bytes_per_token(views[runner]),
                 "read_bandwidth_gbps": None, "bandwidth_share": None, "bandwidth_share_pair_median": None}
        if probe is not None:
            entry.update(bandwidth_pairs(views[runner], runner, entry["weight_bytes"], probe, max(args.reps, 10),
                                         args.prefix))
            out["read_bandwidth_gbps"] = max(out["read_bandwidth_gbps"] or 0, entry["read_bandwidth_gbps"])
        one_split = split[runner]["chain 1"]
        entry["outside_linears_share"] = None if one_split is None else 1 - one_split["linears"] / one
        entry["outside_linears"] = None if one_split is None else {
            part: one_split[part] / one for part in ("attention", "layer_steps", "other")}
        for label, parents in shapes:
            kind, size = label.split(" ")[:2]
            target = entry["rows"] if kind == "chain" else entry["trees"]
            target[size] = {"ms": best[runner][label] * 1000, "x_one_row": best[runner][label] / one,
                            "nodes": len(parents)}
            if split[runner][label] is not None:
                target[size].update({f"{part}_ms": seconds * 1000 for part, seconds in split[runner][label].items()})
        out["runners"][runner] = entry
    return out


def print_table(runners: list[str], shapes, best: dict, split: dict, figures: dict, args) -> None:
    what = "CPU time" if args.cpu_time else "wall time"
    print(f"{figures['model']} {args.dtype} threads={args.threads} ({what}, min of {args.reps} after a warm-up)")
    print(f"{'shape':28s}" + "".join(f"{runner:>28s}" for runner in runners))
    for label, _ in shapes:
        print(f"{label:28s}" + "".join(
            f"{best[r][label] * 1000:16.1f} ms ({best[r][label] / best[r]['chain 1']:4.2f}x)" for r in runners),
            flush=True)
    split_runners = [r for r in runners if any(split[r][label] for label, _ in shapes)]
    if split_runners:                      # where the time of each figure above went, from the kernels' clocks
        print(f"{'ms: linears/attention/steps/rest':34s}" + "".join(f"{runner:>28s}" for runner in split_runners))
        for label, _ in shapes:
            print(f"{label:34s}" + "".join(
                f"{'/'.join(f'{s * 1000:.1f}' for s in split[r][label].values()) if split[r][label] else '-':>28s}"
                for r in split_runners))
    for runner in runners:
        entry = figures["runners"][runner]
        line = f"{runner}: {entry['weight_bytes'] / 1e9:.2f} GB of weights per forward"
        if entry["bandwidth_share"] is not None:
            line += (f"; the 1-token forward runs at {entry['bandwidth_share'] * 100:.0f}% of the read bandwidth "
                     f"({entry['read_bandwidth_gbps']:.1f} GB/s, both the best of the same minutes; median of "
                     f"rounds {entry['bandwidth_share_pair_median'] * 100:.0f}%)")
        if entry["outside_linears_share"] is not None:
            parts = entry["outside_linears"]
            line += (f"; {entry['outside_linears_share'] * 100:.0f}% of it outside the GGUF linears (attention "
                     f"{parts['attention'] * 100:.0f}%, norms / rotary / activation {parts['layer_steps'] * 100:.0f}%,"
                     f" the rest {parts['other'] * 100:.0f}%)")
        print(line)
