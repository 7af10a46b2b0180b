"""Superposed Decoding evaluation (spd.md §5): latency vs k and draft quality, as in the paper's setting
(15-token prefixes of real text, 10 new tokens, batch size 1).

    python -m multidraft.superposed.evaluation --model qwen2.5-coder-0.5b --scorer qwen2.5-coder-1.5b \\
        --ks 1 2 3 4 8 --latency-prefixes 5 --quality-prefixes 100 --out spd_eval.json

Latency: mean wall time per prefix for k drafts by SPD (one pass), by k sequential nucleus runs (HF
`generate`, batch 1, the paper's baseline) and by one batched nucleus run (`num_return_sequences=k`),
same model and prefixes, measured side by side (interleaved per prefix). Nucleus = temperature 0.6,
top-p 0.9 (the paper's Llama-2 defaults); runs are forced to exactly G tokens (`min_new_tokens`).
Quality: perplexity of each draft under the scorer (a larger model with the same tokenizer), per SPD
rank, best-of-k, against one nucleus draft (compute-matched), the best of k nucleus drafts and greedy;
Self-BLEU and unique n-gram ratios. Prefixes come from documents held out of the default n-gram files.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Optional, Sequence

import torch

from multidraft.eval.metrics import best_of_k, draft_perplexities, mean, self_bleu, unique_ngram_ratios
from multidraft.models.threads import check_thread_count

NUCLEUS = {"temperature": 0.6, "top_p": 0.9}


# ------------------------------------------------------------------ prefixes

def _usable_paragraph(text: str, min_chars: int = 120) -> Optional[str]:
    """First prose-like paragraph of a document: long enough, starting with a letter (skips RST markup)."""
    for para in text.replace("\r", "").split("\n\n"):
        para = para.strip()
        if len(para) >= min_chars and para[0].isalpha():
            return para
    return None


def eval_prefixes(tokenizer, count: int, length: int = 15, corpora: Sequence[str] = ("sharegpt", "linux-doc"),
                  skip: int = 0) -> list[list[int]]:
    """`count` prefixes of `length` tokens, one per held-out document, alternating between corpora."""
    from multidraft.ngram.defaults import iter_corpus_documents

    # ShareGPT: the first assistant answer of each held-out conversation (one prefix per conversation).
    streams = [iter_corpus_documents(name, held_out=True, roles=("gpt",), first_message_only=True)
               for name in corpora]
    out: list[list[int]] = []
    seen = 0
    while len(out) < count and streams:
        for stream in list(streams):
            text = None
            for doc in stream:
                text = _usable_paragraph(doc)
                if text:
                    break
            else:
                streams.remove(stream)
                continue
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            if len(ids) < length + 10:
                continue
            seen += 1
            if seen > skip:
                out.append([int(t) for t in ids[:length]])
            if len(out) == count:
                break
    if len(out) < count:
        raise ValueError(f"only {len(out)} held-out prefixes available in {list(corpora)}; pull more corpora")
    return out


# ------------------------------------------------------------------ decoders under test

def run_spd(lm, prefix, k: int, G: int, ngram, **options):
    import multidraft

    options = {"alpha": 0.54, "tau": 0.06, **options}
    if options["alpha"] > 0:
        options["ngram"] = ngram
    return multidraft.generate(lm, list(prefix), method="superposed", max_new_tokens=G, num_drafts=k, **options)


@torch.inference_mode()
def run_nucleus(lm, prefix, num_sequences: int, G: int, seed: int) -> list[list[int]]:
    """HF generate with nucleus sampling; exactly G new tokens per sequence."""
    torch.manual_seed(seed)
    ids = torch.tensor([list(prefix)], device=lm.device)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else next(iter(lm.eos_token_ids), 0)
    out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, max_new_tokens=G,
                            min_new_tokens=G, num_return_sequences=num_sequences, pad_token_id=pad,
                            top_k=0, **NUCLEUS)
    return [row[len(prefix):].tolist() for row in out]


@torch.inference_mode()
def run_greedy(lm, prefix, G: int) -> list[int]:
    ids = torch.tensor([list(prefix)], device=lm.device)
    pad = lm.tokenizer.pad_token_id if lm.tokenizer.pad_token_id is not None else next(iter(lm.eos_token_ids), 0)
    out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=G,
                            pad_token_id=pad)
    return out[0, len(prefix):].tolist()


# ------------------------------------------------------------------ latency

def latency(lm, prefixes, ks: Sequence[int], G: int = 10, ngram=None, seed: int = 0, **spd_options) -> list[dict]:
    """Mean seconds per prefix for k drafts: SPD, k sequential nucleus runs, one batched nucleus run."""
    run_spd(lm, prefixes[0], max(ks), G, ngram, **spd_options)  # warm-up (n-gram file mapped, kernels initialised)
    run_nucleus(lm, prefixes[0], 2, G, seed)
    rows = []
    for k in ks:
        wall = {"spd": [], "sequential_nucleus": [], "batched_nucleus": []}
        cpu = {name: [] for name in wall}
        ngram_t = []

        def timed(name, fn):
            w, c = time.perf_counter(), time.process_time()
            result = fn()
            wall[name].append(time.perf_counter() - w)
            cpu[name].append(time.process_time() - c)  # all threads of this process: steadier under load
            return result

        for i, prefix in enumerate(prefixes):
            gen = timed("spd", lambda: run_spd(lm, prefix, k, G, ngram, **spd_options))
            ngram_t.append(gen.stats.draft_time)
            assert gen.stats.target_calls == G
            timed("sequential_nucleus", lambda: [run_nucleus(lm, prefix, 1, G, seed + 1000 * i + j) for j in range(k)])
            timed("batched_nucleus", lambda: run_nucleus(lm, prefix, k, G, seed + 1000 * i))
        row = {"k": k, "spd_ngram_s": mean(ngram_t)}
        for name in wall:
            row[f"{name}_s"], row[f"{name}_cpu_s"] = mean(wall[name]), mean(cpu[name])
        for base in ("sequential", "batched"):
            row[f"speedup_vs_{base}"] = row[f"{base}_nucleus_s"] / row["spd_s"]
            row[f"cpu_speedup_vs_{base}"] = row[f"{base}_nucleus_cpu_s"] / row["spd_cpu_s"]
        rows.append(row)
        print(f"k={k}: SPD {row['spd_s']:.3f}s wall / {row['spd_cpu_s']:.3f}s CPU (n-gram {row['spd_ngram_s']:.3f}s) | "
              f"{k} sequential nucleus {row['sequential_nucleus_s']:.3f}s ({row['speedup_vs_sequential']:.2f}x wall, "
              f"{row['cpu_speedup_vs_sequential']:.2f}x CPU) | batched nucleus {row['batched_nucleus_s']:.3f}s "
              f"({row['speedup_vs_batched']:.2f}x wall, {row['cpu_speedup_vs_batched']:.2f}x CPU)", flush=True)
    return rows


# ------------------------------------------------------------------ quality

def quality(lm, scorer, prefixes, k: int = 3, G: int = 10, ngram=None, seed: int = 0, **spd_options) -> dict:
    """Scorer perplexities of SPD drafts (by rank, best-of-k), nucleus (1 draft and best of k), greedy;
    Self-BLEU and unique n-gram ratios of SPD and nucleus draft sets."""
    per_rank = [[] for _ in range(k)]
    spd_best, nuc_first, nuc_best, greedy_ppl = [], [], [], []
    spd_bleu, nuc_bleu, spd_uniq, nuc_uniq, drafts_out = [], [], [], [], []
    for i, prefix in enumerate(prefixes):
        spd = [d.token_ids for d in run_spd(lm, prefix, k, G, ngram, **spd_options).drafts]
        nucleus = run_nucleus(lm, prefix, k, G, seed + i)
        greedy = run_greedy(lm, prefix, G)
        ppl = draft_perplexities(scorer, prefix, spd + nucleus + [greedy])
        spd_ppl, nuc_ppl = ppl[: len(spd)], ppl[len(spd): len(spd) + k]
        for rank, value in enumerate(spd_ppl):
            per_rank[rank].append(value)
        spd_best.append(best_of_k(spd_ppl))
        nuc_first.append(nuc_ppl[0])
        nuc_best.append(best_of_k(nuc_ppl))
        greedy_ppl.append(ppl[-1])
        if k >= 2 and len(spd) >= 2:
            spd_bleu.append(self_bleu(spd))
            nuc_bleu.append(self_bleu(nucleus))
        spd_uniq += [unique_ngram_ratios(d) for d in spd]
        nuc_uniq += [unique_ngram_ratios(d) for d in nucleus]
        drafts_out.append({"prefix": lm.decode(prefix), "spd": [lm.decode(d) for d in spd],
                           "spd_ppl": spd_ppl, "nucleus": [lm.decode(d) for d in nucleus], "nucleus_ppl": nuc_ppl})
        if (i + 1) % 10 == 0:
            print(f"  quality: {i + 1}/{len(prefixes)} prefixes", flush=True)
    summary = {
        "k": k, "prefixes": len(prefixes), "new_tokens": G,
        "spd_ppl_by_rank": [mean(r) for r in per_rank], "spd_best_of_k_ppl": mean(spd_best),
        "nucleus_ppl": mean(nuc_first), "nucleus_best_of_k_ppl": mean(nuc_best), "greedy_ppl": mean(greedy_ppl),
        "spd_best_beats_nucleus_fraction": mean([float(b < n) for b, n in zip(spd_best, nuc_first)]),
        "spd_self_bleu": mean(spd_bleu), "nucleus_self_bleu": mean(nuc_bleu),
        "spd_unique_ngram_ratio": [mean(col) for col in zip(*spd_uniq)],
        "nucleus_unique_ngram_ratio": [mean(col) for col in zip(*nuc_uniq)],
    }
    return {"summary": summary, "examples": drafts_out[:5]}


# ------------------------------------------------------------------ entry point

def main(argv=None) -> int:
    from multidraft.errors import MultidraftError

    parser = argparse.ArgumentParser(prog="python -m multidraft.superposed.evaluation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-coder-0.5b")
    parser.add_argument("--scorer", default="qwen2.5-coder-1.5b", help="larger model with the same tokenizer")
    parser.add_argument("--ngram", help="n-gram file (default: the model's default file, built by `multidraft ngram build-default`)")
    parser.add_argument("--ks", type=int, nargs="+", default=[1, 2, 3, 4, 8])
    parser.add_argument("--k", type=int, default=3, help="drafts in the quality evaluation")
    parser.add_argument("--prefix-tokens", type=int, default=15)
    parser.add_argument("--new-tokens", type=int, default=10)
    parser.add_argument("--latency-prefixes", type=int, default=5, help="0 skips the latency part")
    parser.add_argument("--quality-prefixes", type=int, default=100, help="0 skips the quality part")
    parser.add_argument("--alpha", type=float, default=0.54)
    parser.add_argument("--tau", type=float, default=0.06)
    parser.add_argument("--dtype", default=None, help="model dtype (default: the loader's choice for this CPU)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    try:
        if args.threads is not None:
            torch.set_num_threads(check_thread_count(args.threads, auto=False))
        return _main(args)
    except MultidraftError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _main(args) -> int:
    from multidraft import load_model
    from multidraft.ngram.resolve import resolve_ngram

    lm = load_model(args.model, dtype=args.dtype)
    ngram = resolve_ngram(lm, args.ngram) if args.alpha > 0 else None
    results = {"model": args.model, "scorer": args.scorer, "dtype": str(lm.dtype), "threads": torch.get_num_threads(),
               "load_average_start": os.getloadavg(), "prefix_tokens": args.prefix_tokens,
               "new_tokens": args.new_tokens, "alpha": args.alpha, "tau": args.tau,
               "ngram": str(getattr(ngram, "path", None))}
    if args.latency_prefixes:
        prefixes = eval_prefixes(lm.tokenizer, args.latency_prefixes, args.prefix_tokens)
        results["latency"] = latency(lm, prefixes, args.ks, args.new_tokens, ngram, args.seed,
                                     alpha=args.alpha, tau=args.tau)
    if args.quality_prefixes:
        scorer = load_model(args.scorer, dtype=args.dtype)
        if scorer.tokenizer.get_vocab() != lm.tokenizer.get_vocab():
            from multidraft.errors import TokenizerMismatchError
            raise TokenizerMismatchError(f"the scorer {args.scorer} tokenizes differently from {args.model}; "
                                         "pick a scorer of the same family")
        prefixes = eval_prefixes(lm.tokenizer, args.quality_prefixes, args.prefix_tokens)
        results["quality"] = quality(lm, scorer, prefixes, args.k, args.new_tokens, ngram, args.seed,
                                     alpha=args.alpha, tau=args.tau)
        print(json.dumps(results["quality"]["summary"], indent=1))
    results["load_average_end"] = os.getloadavg()
    if args.out:
        with open(args.out + ".tmp", "w") as handle:
            json.dump(results, handle, indent=1)
        os.replace(args.out + ".tmp", args.out)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
