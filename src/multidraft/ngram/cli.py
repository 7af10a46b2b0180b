"""`multidraft ngram build`, `multidraft ngram build-default` and `multidraft ngram info`."""

import re
import resource
import time
from pathlib import Path

from multidraft.errors import InvalidOptionError
from multidraft.fsutil import check_output_file


def parse_orders(text: str) -> list[int]:
    """'2-6' -> [2, 3, 4, 5, 6]; '2,3,5' -> [2, 3, 5]."""
    m = re.fullmatch(r"\s*(\d+)\s*-\s*(\d+)\s*", text)
    try:
        orders = list(range(int(m.group(1)), int(m.group(2)) + 1)) if m else sorted({int(x) for x in text.split(",")})
    except ValueError:
        orders = []
    if not orders or min(orders) < 1 or max(orders) > 15:
        raise InvalidOptionError(f"--orders {text!r}: expected a range like 2-6 or a list like 2,3,4 within 1..15")
    return orders


def _default_out(tokenizer: str, corpora, orders) -> Path:
    from multidraft import paths

    names = "+".join(Path(c).name or c for c in corpora)
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", f"{Path(tokenizer).name}-{names}-{orders[0]}-{orders[-1]}")
    return paths.subdir("ngram") / f"{safe}.ngram"


def _build(args) -> int:
    from multidraft.ngram.build import build
    from multidraft.ngram.corpus import iter_corpus_texts, load_tokenizer, tokenize_documents
    from multidraft.tokenizer_identity import vocab_fingerprint

    orders = parse_orders(args.orders)
    out = Path(args.out) if args.out else _default_out(args.tokenizer, args.corpus, orders)
    check_output_file(out, "--out")
    tokenizer = load_tokenizer(args.tokenizer)
    vocab_size = len(tokenizer)

    def texts():
        for spec in args.corpus:
            yield from iter_corpus_texts(spec)

    started = time.perf_counter()
    stats = build(tokenize_documents(texts(), tokenizer, batch_size=args.batch_size), vocab_size, out,
                  max_order=max(orders), orders=orders, tokenizer_name=args.tokenizer,
                  tokenizer_fingerprint=vocab_fingerprint(tokenizer), corpora=args.corpus,
                  chunk_tokens=args.chunk_tokens, progress=not args.quiet, allow_empty=False)
    elapsed = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    size_mb = out.stat().st_size / 2**20
    print(f"wrote {out} ({size_mb:.1f} MiB): {stats.num_tokens:,} tokens in {stats.num_documents:,} documents")
    print(f"  tokenize+spool {stats.seconds_spool:.1f}s ({stats.num_tokens / max(stats.seconds_spool, 1e-9):,.0f} tok/s), "
          f"count {stats.seconds_count:.1f}s ({stats.num_tokens / max(stats.seconds_count, 1e-9):,.0f} tok/s), "
          f"total {elapsed:.1f}s; peak memory {peak_mb:,.0f} MiB")
    for order, size in stats.level_sizes.items():
        print(f"  order {order}: {size:,} distinct n-grams")
    return 0


def _build_default(args) -> int:
    from multidraft.ngram.defaults import DEFAULT_CORPORA, build_default

    if args.out:
        check_output_file(args.out, "--out")
    for model in args.model:
        build_default(model, args.corpus or DEFAULT_CORPORA, args.out, args.force, progress=not args.quiet)
    return 0


def _info(args) -> int:
    from multidraft.ngram.model import NGramModel

    model = NGramModel.load(args.file, verify=not args.no_verify)
    h = model.header
    print(f"{args.file}: tokenizer {h['tokenizer']!r} ({h['tokenizer_fingerprint']}), vocab {h['vocab_size']}, "
          f"orders {h['orders']}, {h['num_tokens']:,} tokens / {h['num_documents']:,} documents")
    print(f"  corpora {h['corpora']}, corpus digest {h['corpus_digest'][:16]}")
    for level in h["levels"]:
        print(f"  order {level['order']}: {level['size']:,} n-grams, discount {model.discounts[level['order']]:.3f}")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("ngram", help="build and inspect n-gram models (Superposed Decoding, BPD)")
    sub = parser.add_subparsers(dest="ngram_command", metavar="ACTION")
    b = sub.add_parser("build", help="count n-grams of corpora tokenized with a model's tokenizer")
    b.add_argument("--tokenizer", required=True, help="model alias (e.g. smollm2-135m) or local tokenizer folder")
    b.add_argument("--corpus", required=True, nargs="+", metavar="NAME_OR_PATH",
                   help="`multidraft data` names (cpython-stdlib, sharegpt, linux-doc, ...) or text files/folders")
    b.add_argument("--orders", default="2-6", help="n-gram orders, e.g. 2-6 (default) or 2,3,4")
    b.add_argument("--out", help="output file (default: <cache>/ngram/<tokenizer>-<corpora>-<orders>.ngram)")
    b.add_argument("--batch-size", type=int, default=64, help="documents per tokenizer call")
    b.add_argument("--chunk-tokens", type=int, default=1 << 22, help="tokens counted per chunk (memory knob)")
    b.add_argument("--quiet", action="store_true", help="no progress bar")
    b.set_defaults(func=_build)
    d = sub.add_parser("build-default", help="build the default n-gram file of a model's tokenizer (Superposed "
                       "Decoding and blockwise rescoring use it when no ngram= is given)")
    d.add_argument("--model", action="append", required=True,
                   help="model alias whose tokenizer the file is for (repeatable)")
    d.add_argument("--corpus", nargs="+", help="pulled corpora to count (default: sharegpt linux-doc)")
    d.add_argument("--out", help="output file (default: <cache>/ngram/spd-<vocab family>.ngram)")
    d.add_argument("--force", action="store_true", help="rebuild even if the file exists")
    d.add_argument("--quiet", action="store_true", help="no progress bar")
    d.set_defaults(func=_build_default)
    i = sub.add_parser("info", help="show the header of an n-gram file and check its checksum")
    i.add_argument("file")
    i.add_argument("--no-verify", action="store_true", help="skip the sha256 check")
    i.set_defaults(func=_info)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
