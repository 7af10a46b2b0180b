"""How much a forward of n new tokens costs relative to one, per model, dtype and runner: the number that decides
whether drafting can pay on a machine (a drafted step costs one n-token forward plus the drafting).

    .venv/bin/python benchmarks/forward_cost.py --model qwen2.5-coder-1.5b --dtype float32 --runners eager,fast
    .venv/bin/python benchmarks/forward_cost.py --random qwen2.5-1.5b --layers 4 --runners eager,fast
    .venv/bin/python benchmarks/forward_cost.py --random qwen2.5-1.5b --layers 28 --dtype bfloat16 --device cuda \
        --runners fast,static           # on a GPU: HF's cache vs the static cache with CUDA graphs
    .venv/bin/python benchmarks/forward_cost.py --linear --threads 1     # one layer's linears, M = 1..16
    .venv/bin/python benchmarks/forward_cost.py --model qwen2.5-coder-1.5b --runners quantized,fast --bandwidth
    .venv/bin/python benchmarks/forward_cost.py --model qwen2.5-coder-1.5b --runners quantized,quantized-q8
        # the GGUF-block runner beside the fp32 fast runner, with the machine's read bandwidth and bytes per token

After a 300-token prefill, each shape (a chain of n new tokens, n in --chains; or a tree: `k x d` = k branches
of depth d under one root) is timed --reps times per runner, runners interleaved shape by shape so machine
drift hits them alike; the cache is cropped back each time. Prints the minimum and its ratio to the same
runner's 1-token forward. The machine's load (uptime) is printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Optional

import torch

import multidraft
from multidraft.models.runner import LM


def random_model(shape: str, layers: int, dtype: str = "float32", device: str = "cpu") -> LM:
    """A random-weight model of a known shape (no download)."""
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    if shape != "qwen2.5-1.5b":
        raise SystemExit(f"unknown --random shape {shape!r}; known: qwen2.5-1.5b")
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


def runner_views(lm: Optional[LM], runners: list[str], model: Optional[str], dtype: str) -> dict:
    """One LM per runner, each with its own cache: the HF runners share one HF model (eager first: setting a
    runner up (un)installs the CPU kernel on the shared modules, used only inside each LM's own `kernels()`
    context); the quantized runner is its own model (the GGUF's blocks)."""
    views = {}
    for runner in sorted(runners, key=lambda r: r != "eager"):
        if runner.startswith("quantized"):            # quantized, quantized-q8: each its own model (mapped blocks)
            views[runner] = multidraft.load_model(model, runner=runner)
        else:
            if lm is None:
                lm = multidraft.load_model(model, dtype=dtype, runner="eager")
            views[runner] = LM(lm.model, lm.tokenizer, name=lm.name, runner=runner)
    return views


def read_bandwidth(threads: int, megabytes: int = 1024) -> float:
    """GB/s of one streaming read (a sum over a buffer far larger than the caches), best of 5."""
    buffer = torch.ones(megabytes * 2 ** 20 // 4)
    buffer.sum()
    times = []
    for _ in range(5):
        start = time.perf_counter()
        buffer.sum()
        times.append(time.perf_counter() - start)
    return buffer.numel() * 4 / min(times) / 1e9


def weight_bytes_per_token(lm: LM) -> int:
    """Bytes of weights one forward streams: every linear's matrix once (the quantized runner: its blocks; the
    embedding lookup reads a few rows only)."""
    total = 0
    for module in lm.model.modules():
        if isinstance(module, torch.nn.Linear):
            matrix = getattr(module, "gguf_matrix", None)
            total += matrix.nbytes if matrix is not None else module.weight.numel() * module.weight.element_size()
    return total


def time_shapes(views: dict, runners: list[str], shapes: list[tuple[str, list[int]]], reps: int,
                cpu_time: bool = False) -> dict:
    now = clock(cpu_time)
    caches = {}
    for runner, view in views.items():
        caches[runner] = view.new_cache()
        view.forward(caches[runner], list(range(1000, 1300)), logits_rows=slice(-1, None))
    prefix = 300
    best: dict = {runner: {} for runner in runners}
    for label, parents in shapes:
        for runner in runners:                 # interleaved shape by shape: drift hits every runner alike
            view, cache = views[runner], caches[runner]
            times = []
            for rep in range(reps + 1):
                start = now()
                view.forward(cache, [2000 + i for i in range(len(parents))], parents=parents)
                if view.device.type == "cuda":
                    torch.cuda.synchronize()
                times.append(now() - start)
                cache.crop(prefix)
            best[runner][label] = min(times[1:])
    for runner, view in views.items():
        if view.runner != runner:
            print(f"note: runner {runner!r} ran as {view.runner!r} here")
    return best


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="registry alias or path")
    parser.add_argument("--random", default=None, help="random weights of this shape (qwen2.5-1.5b)")
    parser.add_argument("--layers", type=int, default=4, help="decoder layers of the --random model")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the loader's choice; cpu for --random)")
    parser.add_argument("--runners", default="eager,fast")
    parser.add_argument("--chains", default="1,2,4,8,16,32,64")
    parser.add_argument("--trees", default="2x4,4x4,8x8", help="k x d trees (k branches of depth d)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--linear", action="store_true", help="time single linears instead of a model")
    parser.add_argument("--bandwidth", action="store_true",
                        help="also measure the machine's read bandwidth and how close the 1-token forward gets to it")
    parser.add_argument("--cpu-time", action="store_true",
                        help="measure process CPU time instead of wall time (meaningful with --threads 1 on a busy machine)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("load:", os.popen("uptime").read().strip(), flush=True)
    if args.linear:
        linear_curve(args.threads, max(args.reps, 10), args.cpu_time)
        return
    runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    if args.random:
        lm = random_model(args.random, args.layers, args.dtype, args.device or "cpu")
    else:
        lm = None if all(r.startswith("quantized") for r in runners) else multidraft.load_model(
            args.model, dtype=args.dtype, device=args.device, runner="eager")
    views = runner_views(lm, runners, args.model, args.dtype)
    if args.bandwidth:
        bandwidth = read_bandwidth(args.threads)
        print(f"read bandwidth ({args.threads} threads, 1 GiB sum): {bandwidth:.1f} GB/s", flush=True)
    shapes = [(f"chain {n}", list(range(-1, int(n) - 1))) for n in args.chains.split(",") if n]
    for tree in filter(None, args.trees.split(",")):
        k, d = (int(v) for v in tree.split("x"))
        parents = tree_parents(k, d)
        shapes.append((f"tree {k}x{d} ({len(parents)} nodes)", parents))
    best = time_shapes(views, runners, shapes, args.reps, args.cpu_time)
    base = {runner: best[runner]["chain 1"] for runner in runners}
    what = "CPU time" if args.cpu_time else "wall time"
    first = next(iter(views.values()))
    print(f"{first.name} {args.dtype} threads={args.threads} ({what}, min of {args.reps} after a warm-up)")
    print(f"{'shape':28s}" + "".join(f"{runner:>22s}" for runner in runners))
    for label, _ in shapes:
        print(f"{label:28s}" + "".join(
            f"{best[r][label] * 1000:10.0f} ms ({best[r][label] / base[r]:4.2f}x)" for r in runners), flush=True)
    for runner in runners:
        streamed = weight_bytes_per_token(views[runner])
        line = f"{runner}: {streamed / 1e9:.2f} GB of weights per forward"
        if args.bandwidth:
            floor = streamed / (bandwidth * 1e9)
            line += (f"; at {bandwidth:.1f} GB/s that is {floor * 1000:.0f} ms, so the 1-token forward runs at "
                     f"{floor / base[runner] * 100:.0f}% of the read bandwidth")
        print(line)
    if "eager" in runners:
        for runner in runners:
            if runner != "eager":
                print(f"{runner} vs eager, 1-token forward: {base['eager'] / base[runner]:.2f}x faster")
    print("load:", os.popen("uptime").read().strip(), flush=True)


if __name__ == "__main__":
    main()
