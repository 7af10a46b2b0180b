"""Replay prompt-lookup drafters offline on recorded greedy outputs: how many verification steps each would take.

    .venv/bin/python benchmarks/pld_plus_replay.py collect --model qwen2.5-coder-1.5b --prompts 10 --out /tmp/replay
    .venv/bin/python benchmarks/pld_plus_replay.py replay --data /tmp/replay

Why: with 3 prompts per task the wall-clock bench cannot separate drafters that differ by 5%, and each of its
runs takes 20 minutes. A lossless drafter's output is fixed (the greedy text), so how it drafts can be replayed
exactly from one greedy run per prompt plus one full forward that records the artifacts PLD+ ranks with (hidden
states of a few layers, the selected heads' attention rows). The replay counts verification steps and prices each
with the measured cost of an n-token forward (`--cost`, from benchmarks/forward_cost.py); it times nothing.
Greedy costs one step per token, so `tokens / cost` is the speedup the step count predicts (drafting time ignored).
Chat prompts are replayed per turn (turn 2's prompt holds the greedy turn-1 answer, as in the bench).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

import multidraft
from multidraft.drafters.prompt_lookup import lookup
from multidraft.eval.tasks import INPUT_GUIDED_TASKS, VALIDATION_TASKS, load_task
from multidraft.pldplus import calibration as heads_mod
from multidraft.pldplus.ranking import candidates, rank_attention, rank_hidden

LAYERS = (4, 8, 12, 16, 20, 24)


def collect(args) -> None:
    torch.set_num_threads(args.threads)
    lm = multidraft.load_model(args.model, dtype=args.dtype, attn_implementation="eager")
    heads = heads_mod.default_induction_heads(lm, 50)
    layer = heads_mod.default_layer(lm)      # the shipped PLD+(h) layer; the replay ranks with it by default
    layers = sorted({l for l in LAYERS if l <= lm.num_layers} | {layer})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = args.tasks.split(",") if args.tasks else (VALIDATION_TASKS if args.split == "validation"
                                                       else INPUT_GUIDED_TASKS)
    for task in tasks:
        # Tune on split="validation" (prompts the test split never holds), then measure on "test" (issue #33).
        for item in load_task(task, limit=args.prompts, split=args.split):
            answers = []
            for turn in range(item.num_turns):
                name = f"{item.id.replace('/', '_')}_t{turn}.pt"
                prompt = item.turn_messages(turn, answers) if item.turns else item.input
                if (out / name).exists() and turn == item.num_turns - 1:      # resumable: an interrupted run goes on
                    continue
                result = multidraft.generate(lm, prompt, method="greedy", max_new_tokens=args.max_new_tokens)
                answers.append(result.text)
                prompt_ids = lm.encode(prompt)
                seq = prompt_ids + list(result.token_ids)
                with torch.inference_mode():
                    output = lm.model(torch.tensor([seq[:-1]]), output_hidden_states=True, output_attentions=True)
                rows = range(len(prompt_ids) - 2, len(seq) - 1)      # query rows the replay ranks with
                attention = torch.stack([output.attentions[l][0, g, list(rows)] for l, g in heads]).float()
                hidden = {l: output.hidden_states[l][0].float().to(torch.bfloat16) for l in layers}
                torch.save({"task": task, "id": item.id, "turn": turn, "prompt_length": len(prompt_ids), "seq": seq,
                            "hidden": hidden, "attention": attention.to(torch.bfloat16), "heads": heads,
                            "layer": layer, "split": args.split, "model": args.model}, out / name)
                print(name, len(prompt_ids), len(result.token_ids), flush=True)
                del output


# ----- drafters: each maps (record, N = committed length, budget) to a draft (list of tokens) -----
def draft_pld(record, n, budget, max_ngram=3, k=10, variant="hf", **_):
    return [lookup(record["seq"][:n], max_ngram, min(k, budget), budget, variant)]


def draft_pld_reference(record, n, budget, max_ngram=3, k=10, **_):
    # The paper's PLD qualifies a match on the configured K (whole tokens), not on the remaining budget.
    return [lookup(record["seq"][:n], max_ngram, k, budget, "reference")]


def match_lengths(seq: np.ndarray, positions: np.ndarray, cap: int) -> np.ndarray:
    """For each candidate p (seq[p] == seq[-1]), how many tokens ending at p equal the ones ending the sequence."""
    lengths = np.ones(len(positions), dtype=np.int64)
    alive = np.ones(len(positions), dtype=bool)
    last = len(seq) - 1
    for back in range(1, cap):
        ok = alive & (positions - back >= 0)
        ok[ok] = seq[positions[ok] - back] == seq[last - back]
        lengths += ok
        alive = ok
    return lengths


def draft_pld_plus(record, n, budget, rank_by="hidden", layer=12, k=16, short=4, copying=False, min_match=1,
                   prefer_match=0, theta=None, branches=1, branch_tokens=4, long_if_match=0, **_):
    """Branches (lists of tokens) of the draft: the best-ranked source, then up to `branches - 1` runners-up."""
    seq = record["seq"][:n]
    limit = min(k if copying else short, budget)
    positions = candidates(seq, "context")
    if len(positions) == 0 or limit <= 0:
        return []
    if min_match > 1 or prefer_match > 1:
        lengths = match_lengths(np.asarray(seq), positions, max(min_match, prefer_match))
        if min_match > 1:
            keep = lengths >= min_match
            if keep.any():
                positions, lengths = positions[keep], lengths[keep]
        if prefer_match > 1:
            best = lengths.max()
            positions = positions[lengths == best]
    if rank_by == "hidden":
        hidden = record["hidden"][layer][: n - 1].float()
    elif rank_by == "attention":
        row = record["attention"][:, n - 2 - (record["prompt_length"] - 2), : n - 1].float()
    result, seen = [], set()
    while len(result) < branches and len(positions):
        if rank_by == "hidden":
            source = rank_hidden(hidden, positions, theta)
        elif rank_by == "attention":
            source = rank_attention(row, positions)
        else:
            source = int(positions[0])
        if source is None:
            break
        positions = positions[positions != source]
        if long_if_match and not result and not copying:
            if match_lengths(np.asarray(seq), np.array([source]), long_if_match)[0] >= long_if_match:
                limit = min(k, budget)
        branch = tuple(seq[source + 1: source + 1 + (limit if not result else min(limit, branch_tokens))])
        if branch and branch not in seen and not any(b[:len(branch)] == branch for b in seen):
            seen.add(branch)
            result.append(list(branch))
    return result


def trie_size(branches) -> int:
    return len({tuple(b[:i + 1]) for b in branches for i in range(len(b))})


def cost_of(num_tokens: int, costs: dict[int, float]) -> float:
    """Cost of a forward of num_tokens new tokens, linear between the measured points."""
    points = sorted(costs)
    if num_tokens <= points[0]:
        return costs[points[0]]
    for low, high in zip(points, points[1:]):
        if num_tokens <= high:
            return costs[low] + (costs[high] - costs[low]) * (num_tokens - low) / (high - low)
    return costs[points[-1]] * num_tokens / points[-1]


def replay_one(record, drafter, options, costs) -> tuple[int, int, float]:
    """(tokens, steps, cost) of one recorded greedy output under one drafter."""
    seq, start = record["seq"], record["prompt_length"]
    end = len(seq)
    n, steps, cost, copying = start, 0, 0.0, False
    while n < end:
        budget = end - n - 1           # the loop never drafts past max_new_tokens
        branches = drafter(record, n, budget, copying=copying, **options) if budget > 0 else []
        accepted, whole = 0, False
        for draft in branches:
            matched = 0
            for token in draft:
                if n + matched < end and seq[n + matched] == token:
                    matched += 1
                else:
                    break
            if matched > accepted or (matched == accepted and matched == len(draft)):
                accepted, whole = matched, matched == len(draft) and matched > 0
        copying = whole
        steps += 1
        cost += cost_of(trie_size(branches) + 1, costs)
        n += accepted + 1
    return end - start, steps, cost


VARIANTS = {      # label -> (drafter, options); PLD+ labels give num_draft_tokens / short_draft_tokens
    "pld[reference] (paper's PLD, n=3, K=10)": (draft_pld_reference, {}),
    "pld[hf] (library default, n=3, K=10)": (draft_pld, {}),
    "HF prompt lookup (n=2, K=10)": (draft_pld, {"max_ngram": 2}),
    "pld[hf] (n=3, K=6)": (draft_pld, {"k": 6}),
    "PLD+ first 16/4": (draft_pld_plus, {"rank_by": "first"}),
    "PLD+ hidden 16/4": (draft_pld_plus, {}),
    "PLD+ attention 16/4": (draft_pld_plus, {"rank_by": "attention"}),
}


def replay(args) -> None:
    costs = {int(k): float(v) for k, v in (pair.split(":") for pair in args.cost.split(","))}
    records = [torch.load(path) for path in sorted(Path(args.data).glob("*.pt"))]
    variants = dict(VARIANTS)
    for spec in args.extra or []:
        label, _, options = spec.partition("={")
        variants[label] = (draft_pld_plus, json.loads("{" + options))
    tasks = sorted({r["task"] for r in records})
    print(f"{len(records)} recorded outputs; cost per forward: {costs}")
    header = "| variant | " + " | ".join(tasks) + " | all |"
    print(header)
    print("|" + "---|" * (len(tasks) + 2))
    for label, (drafter, options) in variants.items():
        cells = []
        totals = [0, 0, 0.0]
        for task in tasks:
            rows = [replay_one(r, drafter, options, costs) for r in records if r["task"] == task]
            tokens, steps, cost = (sum(x[i] for x in rows) for i in range(3))
            per_prompt = [t / c for t, _, c in rows]
            cells.append(f"{tokens / cost:.2f}x AAL {tokens / steps:.2f} (med {statistics.median(per_prompt):.2f})")
            totals = [totals[0] + tokens, totals[1] + steps, totals[2] + cost]
        cells.append(f"{totals[0] / totals[2]:.2f}x")
        print(f"| {label} | " + " | ".join(cells) + " |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    c.add_argument("--model", default="qwen2.5-coder-1.5b")
    c.add_argument("--dtype", default="bfloat16")
    c.add_argument("--split", choices=("validation", "test"), default="validation",
                   help="validation (the default) to tune on; test only to measure what was tuned")
    c.add_argument("--tasks", default=None, help="comma-separated; default: every input-guided task the split has")
    c.add_argument("--prompts", type=int, default=10)
    c.add_argument("--max-new-tokens", type=int, default=64)
    c.add_argument("--threads", type=int, default=2)
    c.add_argument("--out", required=True)
    r = sub.add_parser("replay")
    r.add_argument("--data", required=True)
    r.add_argument("--cost", default="1:1.0,2:0.89,5:0.96,7:1.02,9:1.12,13:1.2,17:1.3,25:1.5",
                   help="n:relative cost of an n-token forward (default: qwen2.5-coder-1.5b, bf16, AVX512-BF16 EPYC, "
                        "median of 5 after 150- and 600-token contexts)")
    r.add_argument("--extra", action="append", help='LABEL={"option": value} extra PLD+ variants')
    args = parser.parse_args(argv)
    collect(args) if args.command == "collect" else replay(args)


if __name__ == "__main__":
    main()
