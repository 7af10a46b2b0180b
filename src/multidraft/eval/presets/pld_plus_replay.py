"""Replay prompt-lookup drafters offline on recorded greedy outputs: how many verification steps each would take.

    multidraft bench pld_plus_replay collect --model qwen2.5-coder-1.5b --prompts 10 --out /tmp/replay
    multidraft bench pld_plus_replay replay --data /tmp/replay

Why: with 3 prompts per task the wall-clock bench cannot separate drafters that differ by 5%, and each of its
runs takes 20 minutes. A lossless drafter's output is fixed (the greedy text), so how it drafts can be replayed
exactly from one greedy run per prompt plus one full forward that records the artifacts PLD+ ranks with (hidden
states of a few layers, the selected heads' attention rows). The replay counts verification steps and prices each
with the measured cost of an n-token forward (`--cost`, from `multidraft bench micro forward-cost`); it times nothing.
Greedy costs one step per token, so `tokens / cost` is the speedup the step count predicts (drafting time ignored).
Chat prompts are replayed per turn (turn 2's prompt holds the greedy turn-1 answer, as in the bench).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

import multidraft
from multidraft.drafters.prompt_lookup import lookup
from multidraft.eval.bench_args import add_model_options, load_from_args
from multidraft.eval.drafter_replay import adaptive_policy
from multidraft.eval.tasks import INPUT_GUIDED_TASKS, VALIDATION_TASKS, load_task
from multidraft.pldplus import calibration as heads_mod
from multidraft.pldplus.ranking import candidates, rank_attention, rank_hidden

LAYERS = (4, 8, 12, 16, 20, 24)


def collect(args) -> None:
    lm = load_from_args(args, attn_implementation="eager")
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
def draft_pld(record, n, budget, max_ngram=3, k=10, variant="hf", short=None, copying=False, **_):
    """PLD; with `short`, the same two lengths PLD+ has (k while a copy is accepted whole, `short` otherwise)."""
    length = k if short is None or copying else short
    return [lookup(record["seq"][:n], max_ngram, min(length, budget), budget, variant)]


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


def draft_pld_plus(record, n, budget, rank_by="hidden", layer=None, k=16, short=4, copying=False, min_match=1,
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
        hidden = record["hidden"][layer or record.get("layer", 12)][: n - 1].float()
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
    """(tokens, steps, cost) of one recorded greedy output under one drafter; `adaptive` in the options runs the
    library's adaptive draft length on top (it asks for, and verifies, only the depth that pays)."""
    seq, start = record["seq"], record["prompt_length"]
    end = len(seq)
    n, steps, cost, copying = start, 0, 0.0, False
    options = dict(options)
    # The library's adaptive draft length priced with the fixed cost table (its curve at every size up to 64), not
    # measured seconds, so the replay stays deterministic.
    policy = (adaptive_policy({num_new: cost_of(num_new, costs) for num_new in range(1, 65)})
              if options.pop("adaptive", False) else None)
    while n < end:
        budget = end - n - 1           # the loop never drafts past max_new_tokens
        if policy is not None and budget > 0:
            budget = policy.request_depth(budget)
        branches = drafter(record, n, budget, copying=copying, **options) if budget > 0 else []
        if policy is not None and branches:
            depth = policy.choose(list(range(1, len(branches[0]) + 1)))      # chains (one branch) here
            branches = [branches[0][:depth]] if depth else []
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
        if policy is not None and branches:
            policy.observe(len(branches[0]), accepted)
        steps += 1
        cost += cost_of(trie_size(branches) + 1, costs)
        n += accepted + 1
    return end - start, steps, cost


def same_budget_variants() -> dict:
    """Issue #33: every ranker gets the same draft-length budget -- fixed K = 4 / 8 / 16, two lengths (long while a
    copy is accepted whole, short otherwise) 16/4, 16/8, 24/4, and the library's adaptive draft length (up to 16) --
    so PLD is not compared at two settings against PLD+ at a dozen."""
    lengths = {"fixed K=4": {"k": 4, "short": 4}, "fixed K=8": {"k": 8, "short": 8},
               "fixed K=16": {"k": 16, "short": 16}, "16/4": {"k": 16, "short": 4}, "16/8": {"k": 16, "short": 8},
               "24/4": {"k": 24, "short": 4}, "adaptive (up to 16)": {"k": 16, "short": 16, "adaptive": True}}
    variants = {"pld[reference] (paper's PLD, n=3, K=10)": ("pld", draft_pld_reference, {}),
                "HF prompt lookup (n=2, K=10)": ("HF", draft_pld, {"max_ngram": 2})}
    for family, drafter, base in (("pld", draft_pld, {}), ("PLD+ hidden", draft_pld_plus, {"rank_by": "hidden"}),
                                  ("PLD+ attention", draft_pld_plus, {"rank_by": "attention"})):
        for label, length in lengths.items():
            variants[f"{family} {label}"] = (family, drafter, {**base, **length})
    return variants


VARIANTS = same_budget_variants()


def replay(args) -> None:
    """Replay every variant; rank by deterministic counts only (issue #33): acceptance length (tokens per target
    call) and the cost-model speedup (tokens / sum of priced steps, the price list fixed by --cost), never by time."""
    costs = {int(k): float(v) for k, v in (pair.split(":") for pair in args.cost.split(","))}
    records = [torch.load(path) for path in sorted(Path(args.data).glob("*.pt"))]
    variants = dict(VARIANTS)
    for spec in args.extra or []:
        label, _, options = spec.partition("={")
        variants[label] = ("extra", draft_pld_plus, json.loads("{" + options))
    tasks = sorted({r["task"] for r in records})
    splits = sorted({r.get("split", "test") for r in records})
    print(f"{len(records)} recorded outputs ({', '.join(splits)} split; {records[0].get('model', '?')}); "
          f"cost per forward: {costs}")
    print("| variant | " + " | ".join(tasks) + " | all: speedup (cost model) | all: acceptance length |")
    print("|" + "---|" * (len(tasks) + 3))
    rows = {}
    for label, (family, drafter, options) in variants.items():
        per_record = [(r["task"], r["id"], r["turn"], *replay_one(r, drafter, options, costs)) for r in records]
        rows[label] = {"family": family, "options": options, "records": per_record}
        cells = []
        for task in tasks:
            mine = [x for x in per_record if x[0] == task]
            tokens, steps, cost = (sum(x[i] for x in mine) for i in (3, 4, 5))
            cells.append(f"{tokens / cost:.2f}x AAL {tokens / steps:.2f}")
        tokens, steps, cost = (sum(x[i] for x in per_record) for i in (3, 4, 5))
        print(f"| {label} | " + " | ".join(cells) + f" | {tokens / cost:.3f}x | {tokens / steps:.3f} |", flush=True)
    best = {}
    for label, row in rows.items():
        tokens, steps, cost = (sum(x[i] for x in row["records"]) for i in (3, 4, 5))
        if row["family"] in ("pld", "PLD+ hidden", "PLD+ attention") and label in VARIANTS:
            if row["family"] not in best or tokens / cost > best[row["family"]][1]:
                best[row["family"]] = (label, tokens / cost)
    print("\nbest of each family by the cost-model speedup: " + "; ".join(f"{f}: {l} ({v:.3f}x)"
                                                                          for f, (l, v) in best.items()))
    chosen = json.loads(Path(args.chosen).read_text())["chosen"] if args.chosen else {f: l for f, (l, _) in best.items()}
    if args.chosen:
        print("variants chosen on the validation split (" + args.chosen + "): " + "; ".join(
            f"{f}: {l}" for f, l in chosen.items()))
    print_intervals(rows, chosen)
    if args.json:
        Path(args.json).write_text(json.dumps({"splits": splits, "costs": costs, "chosen": chosen,
                                               "best_here": {f: l for f, (l, _) in best.items()},
                                               "rows": rows}, indent=1, default=str))


def print_intervals(rows, chosen) -> None:
    """95 % bootstrap intervals over prompts (chat turns of one prompt stay together) of the chosen PLD+ variants
    against the chosen PLD variant and against HF prompt lookup: ratios of pooled cost-model speedup and of pooled
    acceptance length."""
    from multidraft.eval.bootstrap import pooled_ratio_ci

    def per_prompt(label):
        totals = {}
        for task, prompt, _turn, tokens, steps, cost in rows[label]["records"]:
            t = totals.setdefault((task, prompt), [0, 0, 0.0])
            t[0], t[1], t[2] = t[0] + tokens, t[1] + steps, t[2] + cost
        return totals

    baseline = chosen.get("pld")
    for family in ("PLD+ hidden", "PLD+ attention"):
        if family not in chosen:
            continue
        mine = per_prompt(chosen[family])
        for against in (baseline, "HF prompt lookup (n=2, K=10)"):
            theirs = per_prompt(against)
            keys = sorted(mine)
            speed = pooled_ratio_ci([(mine[k][0], mine[k][2], theirs[k][0], theirs[k][2]) for k in keys])
            accept = pooled_ratio_ci([(mine[k][0], mine[k][1], theirs[k][0], theirs[k][1]) for k in keys])
            print(f"{chosen[family]} over {against}, {len(keys)} prompts: cost-model speedup {speed}, "
                  f"acceptance length {accept} (95 % bootstrap over prompts)")


def add_arguments(parser) -> None:
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("collect")
    add_model_options(c, runner=False)            # eager attention: the HF model
    c.add_argument("--split", choices=("validation", "test"), default="validation",
                   help="validation (the default) to tune on; test only to measure what was tuned")
    c.add_argument("--tasks", default=None, help="comma-separated; default: every input-guided task the split has")
    c.add_argument("--prompts", type=int, default=10)
    c.add_argument("--max-new-tokens", type=int, default=64)
    c.add_argument("--out", required=True)
    r = sub.add_parser("replay")
    r.add_argument("--data", required=True)
    r.add_argument("--cost", default="1:1.0,2:0.89,5:0.96,7:1.02,9:1.12,13:1.2,17:1.3,25:1.5",
                   help="n:relative cost of an n-token forward (default: qwen2.5-coder-1.5b, bf16, AVX512-BF16 EPYC, "
                        "median of 5 after 150- and 600-token contexts)")
    r.add_argument("--extra", action="append", help='LABEL={"option": value} extra PLD+ variants')
    r.add_argument("--json", help="write every variant's per-output counts and the chosen variants here")
    r.add_argument("--chosen", help="a --json file from the validation split: report its chosen variants (test)")


def run(args) -> int:
    collect(args) if args.command == "collect" else replay(args)
    return 0

