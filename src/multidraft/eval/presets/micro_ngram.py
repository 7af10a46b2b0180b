"""N-gram benchmark: tokenize and count throughput, size on disk per order, interpolated lookup latency.

    multidraft bench micro ngram --tokenizer smollm2-135m --corpus cpython-stdlib linux-doc python-doc
    multidraft bench micro ngram --random-tokens 20000000 --vocab 49152      # no tokenizer needed

Times are wall clock with CPU time beside them (the CPU figure is the fairer one on a shared machine).
The lookup benchmark mimics one Superposed Decoding step: k=3 drafts, K=9 candidate tokens each, the
SPD mixture over orders 2..6. "walk" starts from raw token contexts; "incremental" starts from the
drafts' trie states (what a decoder that follows its drafts token by token pays).
"""

import json
import resource
import tempfile
from pathlib import Path

import numpy as np

from multidraft.eval import timing
from multidraft.ngram import NGramModel, build


def timed(fn):
    """(fn()'s result, wall seconds, CPU seconds of this process)."""
    result, span = timing.timed(fn)
    return result, span.seconds, span.cpu_seconds


def tokenize_corpus(args):
    from multidraft.ngram.corpus import iter_corpus_texts, load_tokenizer, tokenize_documents

    tokenizer = load_tokenizer(args.tokenizer)
    texts = [t for spec in args.corpus for t in iter_corpus_texts(spec)]
    chars = sum(len(t) for t in texts)
    docs, wall, cpu = timed(lambda: list(tokenize_documents(texts, tokenizer, batch_size=args.batch_size)))
    n = sum(d.size for d in docs)
    print(f"tokenize: {len(texts):,} documents, {chars / 1e6:.1f}M chars -> {n:,} tokens in {wall:.1f}s wall "
          f"({n / wall:,.0f} tok/s), {cpu:.1f}s CPU of this process (the Rust tokenizer threads are not all counted)")
    return docs, len(tokenizer), {"tokenize_wall_s": wall, "tokenize_cpu_s": cpu, "tokens": n}


def random_corpus(args):
    rng = np.random.default_rng(0)
    # Zipf-like ids so contexts repeat as in text; documents of ~3k tokens.
    ranks = rng.zipf(1.2, size=args.random_tokens) % args.vocab
    perm = rng.permutation(args.vocab)
    ids = perm[ranks].astype(np.uint32)
    docs = np.array_split(ids, max(1, args.random_tokens // 3000))
    return docs, args.vocab, {"tokens": int(ids.size)}


def lookup_bench(model: NGramModel, docs, repeats: int):
    rng = np.random.default_rng(1)
    weights = {2: 0.1, 3: 0.1, 4: 0.1, 5: 0.1, 6: 0.1}
    flat = np.concatenate([d for d in docs if d.size > 8])
    frequent = np.argsort(-np.asarray(model.counts[: model.vocab_size], dtype=np.int64))[:200]
    cases = []
    for _ in range(repeats):
        pos = rng.integers(6, flat.size - 1, size=3)
        contexts = np.stack([flat[p - 5:p] for p in pos]).astype(np.int64)
        cands = np.concatenate([flat[pos][:, None], rng.choice(frequent, size=(3, 8))], axis=1).astype(np.int64)
        cases.append((contexts, cands))
    for contexts, cands in cases[:50]:  # warm the page cache and the fence array
        model.interpolated_batch(contexts, weights, cands)
    walk, incr, nonzero = [], [], 0
    with timing.Span() as whole:
        for contexts, cands in cases:
            q, span = timing.timed(lambda: model.interpolated_batch(contexts, weights, cands))
            walk.append(span.seconds)
            nonzero += int(np.count_nonzero(q))
    walk_cpu = whole.cpu_seconds / len(cases)
    prepared = [(model.context_states(c[:, :-1]), c[:, -1], k) for c, k in cases]
    with timing.Span() as whole:
        for states, last, cands in prepared:
            incr.append(timing.timed(lambda: model.interpolated_batch(
                None, weights, cands, states=model.extend_states(states, last)))[1].seconds)
    incr_cpu = whole.cpu_seconds / len(cases)
    us = lambda xs: (float(np.median(xs) * 1e6), float(np.percentile(xs, 90) * 1e6))
    # The cost of one trivial numpy call right now: lookups are ~40 such calls, so this says how
    # loaded the machine was.
    tiny = np.arange(27)
    with timing.Span() as span:
        for _ in range(20000):
            tiny + 1
    trivial = span.seconds / 20000 * 1e6
    print(f"one trivial numpy call: {trivial:.2f} us")
    (w50, w90), (i50, i90) = us(walk), us(incr)
    wmin, imin = min(walk) * 1e6, min(incr) * 1e6
    print(f"interpolated k=3, K=9, orders 2..6 ({repeats} lookups, {nonzero / len(cases) / 27:.0%} of q nonzero):\n"
          f"  walk from raw contexts: median {w50:.1f} us, p90 {w90:.1f}, min {wmin:.1f}, CPU {walk_cpu * 1e6:.1f} us/lookup\n"
          f"  incremental (states):   median {i50:.1f} us, p90 {i90:.1f}, min {imin:.1f}, CPU {incr_cpu * 1e6:.1f} us/lookup")
    return {"trivial_numpy_call_us": trivial, "walk_us_min": wmin, "walk_cpu_us": walk_cpu * 1e6,
            "incremental_us_min": imin, "incremental_cpu_us": incr_cpu * 1e6, "walk_us_median": w50, "walk_us_p90": w90, "incremental_us_median": i50, "incremental_us_p90": i90}


def add_arguments(parser) -> None:
    parser.add_argument("--tokenizer", help="model alias or tokenizer folder")
    parser.add_argument("--corpus", nargs="+", default=["cpython-stdlib"])
    parser.add_argument("--random-tokens", type=int, help="use a random Zipf corpus of this many tokens instead")
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--max-order", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--chunk-tokens", type=int, default=1 << 22)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--out", help="n-gram file to write (default: a temporary file)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--lookup-only", action="store_true", help="skip the build; benchmark lookups on --out")
    parser.add_argument("--tokens-cache", help="an .npz to save the tokenized corpus to, or reuse it from")


def run(args) -> int:
    if not args.tokenizer and not args.random_tokens:
        parser.error("give --tokenizer or --random-tokens")

    results = {}
    if args.tokens_cache and Path(args.tokens_cache).exists():
        saved = np.load(args.tokens_cache)
        docs = np.split(saved["tokens"], np.cumsum(saved["lengths"])[:-1])
        vocab, info = int(saved["vocab"]), {"tokens": int(saved["tokens"].size)}
        print(f"reusing {info['tokens']:,} tokens from {args.tokens_cache} (tokenizer not timed)")
    else:
        docs, vocab, info = random_corpus(args) if args.random_tokens else tokenize_corpus(args)
        if args.tokens_cache:
            np.savez(args.tokens_cache, tokens=np.concatenate(docs), lengths=[d.size for d in docs], vocab=vocab)
    results.update(info)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out) if args.out else Path(tmp) / "bench.ngram"
        if args.lookup_only:
            model = NGramModel.load(out, verify=False)
            results.update(lookup_bench(model, docs, args.repeats))
            print(json.dumps(results))
            return 0
        stats, wall, cpu = timed(lambda: build(docs, vocab, out, max_order=args.max_order,
                                               chunk_tokens=args.chunk_tokens, tokenizer_name=args.tokenizer or "random"))
        n = stats.num_tokens
        print(f"count (orders 1..{args.max_order}, incl. writing the file): {n:,} tokens in {wall:.1f}s wall "
              f"({n / wall:,.0f} tok/s), {cpu:.1f}s CPU ({n / cpu:,.0f} tok/s per core)")
        results.update({"count_wall_s": wall, "count_cpu_s": cpu, "count_tok_per_s": n / wall,
                        "count_tok_per_cpu_s": n / cpu})
        if "tokenize_wall_s" in results:
            total = results["tokenize_wall_s"] + wall
            print(f"tokenize+count: {n / total:,.0f} tok/s wall")
            results["tokenize_count_tok_per_s"] = n / total
        (_, load_wall, _) = timed(lambda: NGramModel.load(out))
        model = NGramModel.load(out, verify=False)
        size = out.stat().st_size
        print(f"file: {size / 2**20:.1f} MiB ({size / n:.1f} bytes per corpus token); load with sha256 check {load_wall:.2f}s")
        per_order = {}
        count_bytes = model.counts.dtype.itemsize
        for level in model.header["levels"]:
            order, entries = level["order"], level["size"]
            nbytes = entries * (8 + count_bytes + (model.cont_total.dtype.itemsize if order < model.max_order else 0))
            per_order[order] = {"ngrams": entries, "MiB": nbytes / 2**20}
            print(f"  order {order}: {entries:>12,} n-grams {nbytes / 2**20:9.1f} MiB")
        results["per_order"] = per_order
        results["file_MiB"] = size / 2**20
        results.update(lookup_bench(model, docs, args.repeats))
        del model
    results["peak_rss_MiB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS of this process: {results['peak_rss_MiB']:,.0f} MiB (includes the in-memory token corpus)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0

