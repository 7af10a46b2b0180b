"""Agent-style episodes (issue 34): suffix (shared store, and per request) vs pld_plus, pld, HF and llama.cpp prompt
lookup and greedy, side by side and interleaved in one run; plus count-based tuning of suffix's knobs.

    # timed, test split (idle machine): every row on the same step prompts, interleaved step by step
    multidraft bench agentic run --model qwen2.5-coder-1.5b --runner quantized-q8 --threads 2 \
        --episodes 2 --max-new-tokens 256 --out benchmarks/results/DIR
    # counts only (valid under load): greedy answers of a split, then suffix's knobs replayed on them
    multidraft bench agentic collect --model qwen2.5-coder-1.5b --runner quantized-q8 --split validation \
        --episodes 2 --max-new-tokens 256 --out /tmp/agentic-val
    multidraft bench agentic tune --data /tmp/agentic-val

Tasks: agent_edit, agent_fix, agent_chat (multidraft.eval.agentic). Every row of a step sees the same prompt, built
from greedy's earlier answers (lossless rows give those very answers; the llama.cpp rows need not), so ratios are
paired. `suffix` drafts from the request and one SuffixStore shared by every episode of the run, in order;
`suffix_req` from the request alone. tok/s is pooled (tokens / seconds, prefill included); acceptance length =
tokens / target calls after the prefill; "= greedy" counts steps whose tokens equal greedy's. Confidence intervals
(95 %, bootstrap) resample whole episodes: the steps of one episode are not independent.

`tune` replays a lossless drafter on recorded greedy outputs (its output is fixed, so its drafts and the verifier's
acceptance follow from the tokens alone): acceptance length, target calls per token, and the forward cost those
steps would take priced with a measured cost curve (`--cost`, n new tokens -> cost relative to 1, e.g. from
`multidraft bench forward-cost`; the default is the quantized-q8 curve of
benchmarks/results/2026-11-26-cpu-quantized-q8-6x128/forward_cost.txt), under the adaptive draft length on that
curve as the loop runs it by default (`--draft-length fixed`: every drafted token verified). It times nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
from pathlib import Path

import multidraft
from multidraft.drafters.prompt_lookup import PromptLookupDrafter
from multidraft.drafters.suffix import SuffixDrafter
from multidraft.eval import llama_cpp_peer
from multidraft.eval.agentic import AGENT_TASKS
from multidraft.eval.bench_args import add_model_options, load_from_args
from multidraft.eval.bench_methods import resolve_methods
from multidraft.eval.bench_run import _hf_generate
from multidraft.eval.bootstrap import bootstrap_ci, pooled_ratio_ci, ratio_of_sums
from multidraft.eval.drafter_replay import adaptive_policy, cost_curve, replay
from multidraft.eval.tasks import load_task
from multidraft.eval.timing import Span
from multidraft.suffix import SuffixStore
from multidraft.tokenizer_identity import remember_fingerprint

ROWS = ("greedy", "suffix", "suffix_req", "pld_plus", "pld", "hf_prompt_lookup", llama_cpp_peer.GREEDY,
        llama_cpp_peer.PROMPT_LOOKUP)
PEERS = ("hf_prompt_lookup", llama_cpp_peer.GREEDY, llama_cpp_peer.PROMPT_LOOKUP)
MIN_EPISODES_FOR_CI = 5
# max_draft_tokens x alpha x min_token_prob x tree around the defaults (2026-12-03, with the adaptive draft length:
# benchmarks/results/2026-12-03-zen4-draft-confidence; the fixed-length passes of 2026-11-26 chose 32 / 0.5 / 0.7).
GRID = [[32, 64], [0.5, 1.0, 2.0, 4.0], [0.4, 0.7, 0.85], [True, False]]
Q8_COST = {1: 1.00, 2: 1.40, 4: 2.33, 8: 4.37, 16: 7.71}     # quantized-q8, 2 threads, idle (issue 29)


# ---------------------------------------------------------------- episodes
def episodes(tasks, count: int, split: str):
    """(task, item) in a fixed order: the first `count` episodes of each task, tasks interleaved."""
    per_task = [load_task(task, limit=count, split=split) for task in tasks]
    for group in itertools.zip_longest(*per_task):
        for item in group:
            if item is not None:
                yield item.task, item


def step_prompts(lm, item, answer_of_step):
    """Yield (step, prompt ids); `answer_of_step(step, ids)` returns the answer text that the next steps quote."""
    answers: list[str] = []
    for step in range(item.num_turns):
        ids = lm.encode(item.input if step == 0 else item.turn_messages(step, answers))
        answers.append(answer_of_step(step, ids))


# ---------------------------------------------------------------- collect + tune (counts)
def collect(args) -> None:
    lm = load_from_args(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from multidraft.tokenizer_identity import model_vocab_fingerprint
    (out / "meta.json").write_text(json.dumps({"model": args.model, "runner": lm.runner, "eos_token_ids":
                                               list(lm.eos_token_ids), "fingerprint": model_vocab_fingerprint(lm)}))
    path = out / "steps.jsonl"
    done = {(r["id"], r["step"]) for r in map(json.loads, path.read_text().splitlines())} if path.exists() else {}
    texts = {(r["id"], r["step"]): r["text"] for r in map(json.loads, path.read_text().splitlines())} if done else {}
    with open(path, "a") as sink:
        for task, item in episodes(args.tasks.split(","), args.episodes, args.split):
            def answer(step, ids):
                if (item.id, step) in done:
                    return texts[(item.id, step)]
                # suffix is lossless (token-identical to greedy) and faster: it writes the greedy answer sooner
                gen = multidraft.generate(lm, ids, method="suffix", max_new_tokens=args.max_new_tokens)
                row = {"task": task, "id": item.id, "step": step, "prompt_ids": ids, "tokens": list(gen.token_ids),
                       "text": gen.text, "runner": lm.runner, "model": args.model,
                       "max_new_tokens": args.max_new_tokens}
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                print(f"{item.id} step {step}: {len(ids)} prompt tokens, {len(gen.token_ids)} new", flush=True)
                return gen.text
            step_prompts(lm, item, answer)


class _Tokenizer:
    """What a drafter needs of a model in a replay: EOS ids and a vocabulary identity (no weights)."""

    def __init__(self, eos_token_ids, fingerprint):
        self.eos_token_ids = list(eos_token_ids)
        remember_fingerprint(self, fingerprint)
        self.name = "replay"


def tune(args) -> None:
    rows = [json.loads(line) for line in (Path(args.data) / "steps.jsonl").read_text().splitlines()]
    meta = json.loads((Path(args.data) / "meta.json").read_text())
    tokenizer = _Tokenizer(meta["eos_token_ids"], meta["fingerprint"])
    table = {int(k): float(v) for k, v in json.loads(args.cost).items()} if args.cost else Q8_COST
    cost = cost_curve(table)
    policy_table = table if args.draft_length == "adaptive" else None      # None: every drafted token verified
    grid = [dict(zip(("max_draft_tokens", "alpha", "min_token_prob", "tree"), values), shared=True)
            for values in itertools.product(*json.loads(args.grid))]
    results = [evaluate(config, rows, tokenizer, cost, policy_table, args) for config in grid + [{"pld": True}]]
    # The best few again without the shared store: what the store adds.
    best = sorted((r for r in results if not r.get("pld")), key=lambda r: -r["predicted_speedup"])[:3]
    results += [evaluate({**{k: r[k] for k in ("max_draft_tokens", "alpha", "min_token_prob", "tree")}, "shared": False},
                         rows, tokenizer, cost, policy_table, args) for r in best]
    results.sort(key=lambda r: -r["predicted_speedup"])
    out = Path(args.data) / "tune.json"
    out.write_text(json.dumps(results, indent=1))
    lines = ["| max_draft_tokens | alpha | min_token_prob | tree | shared store | acceptance length | target calls / "
             "token | drafted / call | predicted speedup (cost curve) [95% CI over episodes] |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results[: args.top] + [r for r in results[args.top:] if r.get("pld") or not r.get("shared")]:
        if r.get("pld"):
            lines.append(f"| pld (defaults) | | | | | {r['acceptance_length']:.2f} | {r['calls_per_token']:.3f} | "
                         f"{r['drafted_per_call']:.1f} | {r['speedup_ci']} |")
            continue
        lines.append(f"| {r['max_draft_tokens']} | {r['alpha']} | {r['min_token_prob']} | {r['tree']} | {r['shared']} | "
                     f"{r['acceptance_length']:.2f} | {r['calls_per_token']:.3f} | {r['drafted_per_call']:.1f} | "
                     f"{r['speedup_ci']} |")
    (Path(args.data) / "tune.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def evaluate(config, rows, tokenizer, cost, policy_table, args) -> dict:
    """Replay one drafter configuration over every recorded step, in order (the shared store grows as it would);
    `policy_table` (new tokens -> cost): the adaptive draft length on that curve, None: every drafted token verified."""
    options = {k: v for k, v in config.items() if k not in ("shared", "pld")}
    store = SuffixStore(200_000) if config.get("shared") else None
    per_episode: dict[str, list[int | float]] = {}
    for row in rows:
        drafter = (PromptLookupDrafter() if config.get("pld")
                   else SuffixDrafter(tokenizer, store=store, **options))
        policy = None if policy_table is None else adaptive_policy(policy_table)     # one per request
        counts = replay(drafter, tokenizer, row["prompt_ids"], row["tokens"],
                        row.get("max_new_tokens", args.max_new_tokens), cost, policy)
        acc = per_episode.setdefault(row["id"], [0, 0, 0.0, 0])
        for i, key in enumerate(("tokens", "calls", "cost", "drafted")):
            acc[i] += counts[key]
    episode_rows = list(per_episode.values())
    tokens = sum(r[0] for r in episode_rows)
    calls = sum(r[1] for r in episode_rows)
    price = sum(r[2] for r in episode_rows)
    result = {**config, "tokens": tokens, "acceptance_length": tokens / calls, "calls_per_token": calls / tokens,
              "predicted_speedup": tokens / price, "drafted_per_call": sum(r[3] for r in episode_rows) / calls,
              "speedup_ci": str(bootstrap_ci([(r[0], r[2]) for r in episode_rows],
                                             lambda a: ratio_of_sums(a[:, 0], a[:, 1]), resamples=2000))}
    print(json.dumps(result), flush=True)
    return result


# ---------------------------------------------------------------- the timed run
def run_row(lm, row: str, ids: list[int], args, store, peers, prefix_caches=None) -> dict:
    if row in PEERS:
        method = peers[row]
        if llama_cpp_peer.is_llama_cpp(row):      # one Llama per row and run, built outside the timed span
            llama = llama_cpp_peer.runner_for(lm, row, method.options, len(ids) + args.max_new_tokens, args.model)
            with Span() as span:
                tokens = llama.generate(ids, args.max_new_tokens, lm.eos_token_ids,
                                        reuse_prefix=prefix_caches is not None)
        else:
            with Span() as span:
                tokens = _hf_generate(lm, None, method, ids, args.max_new_tokens)
            eos = next((i for i, t in enumerate(tokens) if t in lm.eos_token_ids), None)
            tokens = tokens if eos is None else tokens[: eos + 1]
        return {"tokens": tokens, "seconds": span.seconds, "calls": None}
    method, options = {"greedy": ("greedy", {}), "pld": ("pld", {}), "pld_plus": ("pld_plus", {}),
                       "suffix_req": ("suffix", {}), "suffix": ("suffix", {"store": store})}[row]
    prefix_cache = None if prefix_caches is None else prefix_caches.setdefault(row, multidraft.PrefixCache(512))
    with Span() as span:
        gen = multidraft.generate(lm, ids, method=method, max_new_tokens=args.max_new_tokens,
                                  draft_length=args.draft_length, prefix_cache=prefix_cache, **options)
    seconds = span.seconds
    calls = gen.stats.verification_calls if row != "greedy" else None     # the bench's acceptance-length steps
    return {"tokens": list(gen.token_ids), "seconds": seconds, "calls": calls, "text": gen.text,
            "reused": gen.stats.prefix_reused_tokens}


def timed_run(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = args.rows.split(",")
    lm = load_from_args(args)
    peers = {m.name: m for m in resolve_methods([r for r in rows if r in PEERS] or ["greedy"], False,
                                                model=args.model)[0]}
    store = SuffixStore(args.store_tokens, lm=lm)
    items = list(episodes(args.tasks.split(","), args.episodes, "test"))
    # Warm-up (untimed, its own store): kernels, llama.cpp contexts, the HF peer model, the forward-cost table.
    warm = lm.encode(items[0][1].input)[:64]
    for row in rows:
        run_row(lm, row, warm, argparse.Namespace(**{**vars(args), "max_new_tokens": 4}), SuffixStore(1000, lm=lm), peers)
    # --prefix-cache: each of our rows reuses its own earlier steps' keys/values (a PrefixCache per row, as if each
    # ran its own server), the llama.cpp rows their Llama's previous sequence; HF's generate() keeps nothing.
    prefix_caches = {} if args.prefix_cache else None
    load_start = os.getloadavg()[0]
    records = []
    with open(out / "rows.jsonl", "w") as sink:
        for task, item in items:
            def answer(step, ids):
                greedy = None
                for row in rows:
                    result = run_row(lm, row, ids, args, store, peers, prefix_caches)
                    if row == "greedy":
                        greedy = result
                    record = {"task": task, "episode": item.id, "step": step, "row": row, "prompt_tokens": len(ids),
                              "n": len(result["tokens"]), "seconds": result["seconds"], "calls": result["calls"],
                              "reused": result.get("reused"),
                              "equal": result["tokens"] == greedy["tokens"], "load": os.getloadavg()[0]}
                    records.append(record)
                    sink.write(json.dumps(record) + "\n")
                    sink.flush()
                    print(f"{item.id} step {step} {row:24s} {record['n']:4d} tok {record['seconds']:6.2f} s "
                          f"equal={record['equal']} load {record['load']:.1f}", flush=True)
                return greedy["text"]
            step_prompts(lm, item, answer)
    table = summarize(records, rows, args, load_start, store)
    (out / "table.md").write_text(table)
    print(table)


def summarize(records, rows, args, load_start, store) -> str:
    # The resampled unit: whole episodes when there are enough of them (their steps are not independent), else
    # steps (narrower than the truth; the table says which).
    by_episode = len({r["episode"] for r in records}) >= MIN_EPISODES_FOR_CI
    unit = (lambda r: r["episode"]) if by_episode else (lambda r: (r["episode"], r["step"]))
    episodes_ = list(dict.fromkeys(unit(r) for r in records))

    def per_episode(row, task=None):
        """(tokens, seconds, calls) per episode of `task` (all tasks: None)."""
        out = []
        for episode in episodes_:
            sel = [r for r in records if r["row"] == row and unit(r) == episode and task in (None, r["task"])]
            if sel:
                out.append((sum(r["n"] for r in sel), sum(r["seconds"] for r in sel),
                            sum(r["calls"] or 0 for r in sel)))
        return out

    memory = store.describe()
    lines = [f"{args.model}, runner {args.runner}, {args.threads} threads, draft length {args.draft_length}; "
             f"{len({r['episode'] for r in records})} episodes ({args.tasks}), {sum(1 for r in records if r['row'] == rows[0])} steps, "
             f"<= {args.max_new_tokens} new tokens per step; load average {load_start:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end", "",
             f"tok/s pooled; ratios with 95% bootstrap intervals over {'episodes' if by_episode else 'steps'} (paired, "
             f"{len(episodes_)} units); AAL = acceptance length.", ""]
    baselines = [b for b in ("greedy", "pld_plus", "hf_prompt_lookup", llama_cpp_peer.PROMPT_LOOKUP) if b in rows]
    for task in [None] + args.tasks.split(","):
        lines += [f"### {task or 'all agent tasks'}", "",
                  "| row | tok/s | " + " | ".join(f"vs {b}" for b in baselines) + " | AAL [CI] | = greedy |",
                  "|---|---|" + "---|" * len(baselines) + "---|---|"]
        for row in rows:
            mine = per_episode(row, task)
            if not mine:
                continue
            rate = sum(m[0] for m in mine) / sum(m[1] for m in mine)
            cells = []
            for base in baselines:
                theirs = per_episode(base, task)
                pairs = [(a[0], a[1], b[0], b[1]) for a, b in zip(mine, theirs)]
                cells.append("-" if base == row else str(pooled_ratio_ci(pairs, resamples=2000)) if len(pairs) > 1
                             else f"{rate / (sum(b[0] for b in theirs) / sum(b[1] for b in theirs)):.2f}")
            aal = (str(bootstrap_ci([(m[0], m[2]) for m in mine], lambda a: ratio_of_sums(a[:, 0], a[:, 1]),
                                    resamples=2000)) if len(mine) > 1 and all(m[2] for m in mine) else "-")
            same = [r["equal"] for r in records if r["row"] == row and task in (None, r["task"])]
            lines.append(f"| {row} | {rate:.2f} | " + " | ".join(cells) + f" | {aal} | {sum(same)}/{len(same)} |")
        lines.append("")
    lines += [f"shared suffix store after the run: {memory['tokens']} tokens, {memory['documents']} documents, "
              f"{memory['memory_bytes'] / 1e6:.1f} MB",
              f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}"]
    return "\n".join(lines) + "\n"


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("run", "collect"):
        p = sub.add_parser(name)
        add_model_options(p)
        p.add_argument("--tasks", default=",".join(AGENT_TASKS))
        p.add_argument("--episodes", type=int, default=1, help="episodes per task")
        p.add_argument("--max-new-tokens", type=int, default=256)
        p.add_argument("--out", required=True)
    sub.choices["collect"].add_argument("--split", default="validation")
    sub.choices["run"].add_argument("--rows", default=",".join(ROWS))
    sub.choices["run"].add_argument("--draft-length", default="adaptive", choices=("fixed", "adaptive"))
    sub.choices["run"].add_argument("--store-tokens", type=int, default=200_000)
    sub.choices["run"].add_argument("--prefix-cache", action="store_true",
                                    help="reuse each row's earlier keys/values across steps (our rows: a "
                                         "PrefixCache each, quantized-q8 only; llama.cpp: its previous sequence)")
    t = sub.add_parser("tune")
    t.add_argument("--data", required=True)
    t.add_argument("--cost", help='JSON {"n new tokens": cost relative to 1}, default: the quantized-q8 curve')
    t.add_argument("--top", type=int, default=15)
    t.add_argument("--draft-length", default="adaptive", choices=("fixed", "adaptive"),
                   help="replay the adaptive draft length on the --cost curve (the loop's default) or verify every "
                        "drafted token")
    t.add_argument("--grid", default=json.dumps(GRID), help="JSON [max_draft_tokens values, alpha values, "
                   "min_token_prob values, tree values]; every combination is replayed with the shared store")
    t.add_argument("--max-new-tokens", type=int, default=256, help="for steps files that do not record it")


def run(args) -> int:
    {"run": timed_run, "collect": collect, "tune": tune}[args.command](args)

