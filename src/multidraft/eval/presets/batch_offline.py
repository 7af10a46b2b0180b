"""Offline batching (issue 31): `multidraft.generate_batch` of code-edit prompts vs running them one by one, and vs
HF transformers' continuous batching (`model.generate_batch`, greedy), side by side in one run.

    multidraft bench batch_offline --model qwen2.5-coder-1.5b --prompts 32 --max-tokens 128 \
        --methods greedy,pld --batch 8,16,32 --json benchmarks/results/batch_offline.json

Reports tokens/s per row, the ratio to the one-by-one row of the same method, mean acceptance length, and whether
every prompt's tokens equal its one-by-one tokens (they must on the quantized runner). Needs `multidraft data
pull cpython-stdlib`. Run it on an idle machine: the numbers are wall-clock.
"""

from __future__ import annotations

import json

from multidraft.eval.bench_args import add_model_options, load_from_args
from multidraft.eval.timing import Span

DRAFT_ROOM = 128          # the engine's default draft_room: slots a request reserves for a step's draft rows


def add_arguments(parser) -> None:
    add_model_options(parser)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--methods", default="greedy,pld")
    parser.add_argument("--batch", default="8,16,32", help="max_num_seqs values of the batched rows")
    parser.add_argument("--kv-slots", type=int, default=None,
                        help="the engine's KV arena (default: room for the largest batch of the longest prompt; the "
                             "engine's own 8192 slots admit ~20 code-edit requests of ~180-300 + 128 + 128 at once)")
    parser.add_argument("--draft-length", choices=("fixed", "adaptive"), default="adaptive",
                        help="every row's draft_length (default adaptive, as generate / serve: the batched rows then "
                             "share the engine's global draft budget; fixed verifies every drafted token)")
    parser.add_argument("--draft-model", default=None,
                        help="draft model of the draft-model methods (speculative, multi_draft, mtad, bild); default: "
                             "the target's default draft (qwen2.5-coder-0.5b for qwen2.5-coder-1.5b)")
    parser.add_argument("--no-hf", action="store_true", help="skip HF's generate_batch peer")
    parser.add_argument("--json", default=None)


def run(args) -> int:
    import multidraft
    from multidraft.eval.tasks import load_task
    from multidraft.methods import get_method

    lm = load_from_args(args)
    messages = [item.messages for item in load_task("code_edit", limit=args.prompts)]
    rows = []

    def row(name, method, seconds, results, reference=None):
        tokens = sum(len(g.token_ids) for g in results)
        calls = sum(g.stats.verification_calls for g in results)
        entry = {"row": name, "method": method, "seconds": seconds, "tokens": tokens,
                 "tokens_per_second": tokens / seconds, "mean_acceptance_length": tokens / calls if calls else None,
                 "identical_to_one_by_one": None if reference is None else
                 sum(a.token_ids == b.token_ids for a, b in zip(results, reference))}
        rows.append(entry)
        print(json.dumps(entry), flush=True)
        return entry

    sizes = [int(b) for b in args.batch.split(",")]
    kv_slots = args.kv_slots or max(8192, max(sizes) * (max(len(lm.encode(m)) for m in messages) + args.max_tokens
                                                       + DRAFT_ROOM))
    artifacts = multidraft.Artifacts()                # a draft model is loaded once, by the warm-up
    for method in args.methods.split(","):
        options = {"draft_model": args.draft_model} if args.draft_model and \
            "draft_model" in get_method(method).artifacts else {}
        build = lambda m, tokens: multidraft.Request.build(m, method, max_new_tokens=tokens, options=options,
                                                           draft_length=args.draft_length)
        multidraft.generate_request(lm, build(messages[0], 8), artifacts=artifacts)   # warm-up: kernels, costs
        requests = [build(m, args.max_tokens) for m in messages]
        clock = Span.start()
        alone = [multidraft.generate_request(lm, r, artifacts=artifacts) for r in requests]
        base = row("one_by_one", method, clock.elapsed(), alone)
        for size in sizes:
            clock = Span.start()
            batched = multidraft.generate_batch(lm, requests, max_num_seqs=size, kv_slots=kv_slots,
                                                artifacts=artifacts)
            entry = row(f"generate_batch/{size}", method, clock.elapsed(), batched, alone)
            entry["vs_one_by_one"] = entry["tokens_per_second"] / base["tokens_per_second"]
    if not args.no_hf:
        rows.append(hf_generate_batch(args.model, messages, args.max_tokens))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"model": args.model, "runner": lm.runner, "kv_slots": kv_slots,
                       "draft_length": args.draft_length, "rows": rows}, handle, indent=2)
    return 0


def hf_generate_batch(model_name: str, messages: list, max_tokens: int) -> dict:
    """HF transformers' continuous batching (greedy) on the model's HF folder, same prompts."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        from multidraft.models.loader import hf_folder, resolve
        folder = str(hf_folder(resolve(model_name)))
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        inputs = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=True) for m in messages]
        inputs = [list(i["input_ids"]) if hasattr(i, "keys") else list(i) for i in inputs]
        config = GenerationConfig(max_new_tokens=max_tokens, do_sample=False, eos_token_id=tokenizer.eos_token_id,
                                  pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)
        clock = Span.start()
        outputs = model.generate_batch(inputs=inputs, generation_config=config)
        seconds = clock.elapsed()
        tokens = sum(len(o.generated_tokens) for o in outputs.values())
        return {"row": "hf_generate_batch", "method": "greedy", "seconds": seconds, "tokens": tokens,
                "tokens_per_second": tokens / seconds}
    except Exception as error:        # an older transformers, no folder: say so in the results
        return {"row": "hf_generate_batch", "error": f"{type(error).__name__}: {error}"}

