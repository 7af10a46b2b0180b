"""Where speculation stops paying as the batch grows: a MODEL from counts, not a timing (issue 31).

    PYTHONPATH=src python benchmarks/results/2026-11-26-batch-budget-model/batch_budget_model.py --model qwen2.5-coder-0.5b --runner quantized-q8 \
        --prompts 16 --max-tokens 128 --methods pld,suffix --counts-out DIR/counts.json     > DIR/model.txt
    PYTHONPATH=src python benchmarks/results/2026-11-26-batch-budget-model/batch_budget_model.py --counts DIR/counts.json          # the model only

Counts: each code-edit prompt is decoded alone with draft_length="fixed" (every drafted node verified), and every
verification step is recorded as (the draft's node depths, the accepted path's length). Nothing is timed.

Model: the cost of a forward of n rows is the measured q8 table below (qwen2.5-coder-1.5b, 2 threads, from
benchmarks/results/2026-11-26-cpu-quantized-q8-6x128/forward_cost.txt), linear between its points and beyond 16
rows along its last segment. For a batch of B requests, many random batches of B recorded steps are drawn; each
batch step is costed three ways:
- none:   no speculation, B rows, B tokens;
- fixed:  every draft verified whole, B + sum(nodes) rows, sum(1 + accepted) tokens;
- budget: what the engine's global budget (decoders/draft_length.py `batch_depths`) verifies, given one pooled
          per-depth acceptance estimate (a DraftLength fed with every recorded step) and the cost table: a draft
          cut to depth d yields 1 + min(accepted, d) tokens (greedy: the accepted path's prefix stays accepted).
Printed per B: tokens per unit of time (1 unit = one 1-row forward; x 1 / 0.072 s for tok/s at the table's 72 ms),
the ratio to no speculation, and the depths the budget picks. What it leaves out: drafting time (pld / suffix
draft in well under a ms), verification and sampling time, prefill, the acceptance of a 1.5B target (the counts
come from the --model run), and each request keeping its own decayed estimate in the engine (pooled here).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter

from multidraft.eval.drafter_replay import cost_curve

Q8_COST = {1: 1.00, 2: 1.40, 4: 2.33, 8: 4.37, 16: 7.71}      # forward of n rows / forward of 1 row
ONE_ROW_SECONDS = 0.072                                        # the table's 1-row q8 forward (72 ms)
# relative cost of a forward of n rows: the table, linear between its points and beyond its last one
forward_cost = cost_curve(Q8_COST)


# ----------------------------------------------------------------------------- counts (no timing)


class _RecordingVerifier:
    """The request's verifier, recording (draft node depths, accepted path length) of every step."""

    def __init__(self, inner, steps: list):
        self.inner, self.steps = inner, steps

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def verify(self, draft, logits, sampler, first_position):
        verdict = self.inner.verify(draft, logits, sampler, first_position=first_position)
        self.steps.append((draft.depths(), len(verdict.accepted_nodes)))
        return verdict


def collect_counts(model: str, runner, prompts: int, max_tokens: int, methods: list[str]) -> dict:
    import multidraft
    from multidraft.api import prepare_request
    from multidraft.decoders.loop import draft_and_verify
    from multidraft.eval.tasks import load_task

    lm = multidraft.load_model(model, **({"runner": runner} if runner else {}))
    messages = [item.messages for item in load_task("code_edit", limit=prompts)]
    counts = {"model": model, "runner": lm.runner, "prompts": prompts, "max_tokens": max_tokens, "steps": {}}
    for method in methods:
        steps: list = []
        for message in messages:
            request = multidraft.Request.build(message, method, max_new_tokens=max_tokens, draft_length="fixed")
            p = prepare_request(lm, request)
            drafter, verifier = p.loop_pair(lm, request)
            draft_and_verify(lm, p.prompt_ids, drafter, _RecordingVerifier(verifier, steps), p.sampler, p.output,
                             p.stats, "fixed")
        counts["steps"][method] = steps
        print(f"# counted {method}: {len(steps)} steps, {sum(1 + a for _, a in steps)} tokens", file=sys.stderr)
    return counts


# ----------------------------------------------------------------------------- the model


def pooled_policy(steps, costs):
    """One DraftLength fed with every recorded step, undecayed: the pooled per-depth acceptance."""
    from multidraft.decoders.draft_length import DraftLength

    policy = DraftLength(costs, decay=1.0)
    for depths, accepted in steps:
        if depths:
            policy.observe(max(depths), accepted)
    return policy


def model_rows(steps, batch_sizes, samples: int, seed: int) -> list[dict]:
    from multidraft.decoders.draft_length import ForwardCosts, batch_depths, nodes_by_depth

    class TableCosts(ForwardCosts):
        """The budget sees the same (interpolated) costs as the model."""

        def cost(self, num_new: int) -> float:
            return forward_cost(num_new)

        def relative(self, num_new: int) -> float:
            return forward_cost(num_new) / forward_cost(1)

    costs = TableCosts()
    policy = pooled_policy(steps, costs)
    rng = random.Random(seed)
    out = []
    for size in batch_sizes:
        time = {"none": 0.0, "fixed": 0.0, "budget": 0.0}
        tokens = {"none": 0.0, "fixed": 0.0, "budget": 0.0}
        depth_counts: Counter = Counter()
        drafted_counts: Counter = Counter()
        cut_to_zero = offered = 0
        for _ in range(samples):
            batch = [steps[rng.randrange(len(steps))] for _ in range(size)]
            offers = [nodes_by_depth(depths) for depths, _ in batch]
            chosen = batch_depths(costs, size, float(size), [(policy, nodes) for nodes in offers])
            time["none"] += forward_cost(size)
            tokens["none"] += size
            time["fixed"] += forward_cost(size + sum(len(depths) for depths, _ in batch))
            tokens["fixed"] += sum(1 + accepted for _, accepted in batch)
            time["budget"] += forward_cost(size + sum(nodes[d] for nodes, d in zip(offers, chosen)))
            tokens["budget"] += sum(1 + min(accepted, d) for (_, accepted), d in zip(batch, chosen))
            depth_counts.update(chosen)
            drafted_counts.update(max(depths, default=0) for depths, _ in batch)
            offered += sum(1 for depths, _ in batch if depths)
            cut_to_zero += sum(1 for (depths, _), d in zip(batch, chosen) if depths and d == 0)
        rate = {k: tokens[k] / time[k] for k in time}
        total = sum(depth_counts.values())
        out.append({"batch": size, "tokens_per_unit": rate,
                    "tokens_per_second_at_72ms": {k: v / ONE_ROW_SECONDS for k, v in rate.items()},
                    "budget_vs_none": rate["budget"] / rate["none"], "fixed_vs_none": rate["fixed"] / rate["none"],
                    "mean_budget_depth": sum(d * c for d, c in depth_counts.items()) / total,
                    "share_of_drafts_cut_to_zero": cut_to_zero / max(1, offered),
                    "mean_drafted_depth": sum(d * c for d, c in drafted_counts.items()) / total,
                    "budget_depths": dict(sorted(depth_counts.items()))})
    return out


def print_table(method: str, steps, rows: list[dict]) -> None:
    accepted = [a for depths, a in steps if depths]
    print(f"\n## {method}: {len(steps)} recorded steps ({len(accepted)} with a draft, mean accepted "
          f"{sum(accepted) / max(1, len(accepted)):.2f} of mean depth "
          f"{sum(max(d) for d, _ in steps if d) / max(1, len(accepted)):.2f})")
    print("MODEL from counts x the q8 cost table, not a timing. tok/unit: tokens per 1-row forward time; "
          "tok/s: x 1/0.072 s")
    print("| batch | none tok/s | fixed tok/s | budget tok/s | budget / none | fixed / none | budget depth mean "
          "| drafts cut to 0 | drafted depth mean |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s = r["tokens_per_second_at_72ms"]
        print(f"| {r['batch']} | {s['none']:.2f} | {s['fixed']:.2f} | {s['budget']:.2f} | {r['budget_vs_none']:.2f}x "
              f"| {r['fixed_vs_none']:.2f}x | {r['mean_budget_depth']:.2f} "
              f"| {100 * r['share_of_drafts_cut_to_zero']:.0f}% "
              f"| {r['mean_drafted_depth']:.2f} |")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--runner", default="quantized-q8")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--methods", default="pld,suffix")
    parser.add_argument("--batch", default="1,2,4,8,16")
    parser.add_argument("--samples", type=int, default=2000, help="random batches per batch size")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--counts", default=None, help="read the counts from this JSON instead of decoding")
    parser.add_argument("--counts-out", default=None, help="write the counts to this JSON")
    parser.add_argument("--json", default=None, help="write the model's rows to this JSON")
    args = parser.parse_args(argv)

    if args.counts:
        with open(args.counts) as handle:
            counts = json.load(handle)
    else:
        counts = collect_counts(args.model, args.runner, args.prompts, args.max_tokens, args.methods.split(","))
        if args.counts_out:
            with open(args.counts_out, "w") as handle:
                json.dump(counts, handle)
    sizes = [int(b) for b in args.batch.split(",")]
    print(f"# counts: {counts['model']} ({counts['runner']}), {counts['prompts']} code_edit prompts x "
          f"{counts['max_tokens']} tokens, draft_length=fixed; costs: Q8_COST {Q8_COST} (qwen2.5-coder-1.5b)")
    result = {"counts": {k: v for k, v in counts.items() if k != "steps"}, "q8_cost": Q8_COST, "methods": {}}
    for method, steps in counts["steps"].items():
        steps = [(list(depths), int(accepted)) for depths, accepted in steps]
        rows = model_rows(steps, sizes, args.samples, args.seed)
        print_table(method, steps, rows)
        result["methods"][method] = rows
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
