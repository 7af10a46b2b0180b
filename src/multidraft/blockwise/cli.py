"""`multidraft heads train | list | info`."""

from __future__ import annotations

from pathlib import Path

from multidraft.fsutil import check_output_file
from multidraft.models.device import add_device_argument


def register(subparsers) -> None:
    parser = subparsers.add_parser("heads", help="blockwise parallel decoding heads (method='blockwise')")
    sub = parser.add_subparsers(dest="heads_command", metavar="ACTION")

    train = sub.add_parser("train", help="train heads 2..h on a frozen base model (CPU, time-boxed, resumable)")
    train.add_argument("--model", required=True, help="base model alias or path (e.g. smollm2-135m)")
    train.add_argument("--corpus", action="append", required=True,
                       help="pulled corpus name, file or folder (repeatable; e.g. cpython-stdlib, sharegpt)")
    train.add_argument("--num-heads", type=int, default=4, help="h, counting head 1 (the base's own); default 4")
    train.add_argument("--minutes", type=float, default=15.0, help="training time budget (default 15)")
    train.add_argument("--tokens", type=int, default=32768, help="corpus tokens of cached hidden states (default 32768)")
    train.add_argument("--seq-len", type=int, default=256)
    train.add_argument("--ffn-size", type=int, default=0, help="head FFN width (default: the base's FFN size)")
    train.add_argument("--shortlist", type=int, default=8192, help="tokens the heads can draft (0 = whole vocabulary)")
    train.add_argument("--labels", choices=("base", "corpus"), default="base",
                       help="base: distil the base's greedy tokens (default); corpus: the corpus tokens (paper)")
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--batch-size", type=int, default=256)
    train.add_argument("--threads", type=int, default=1, help="torch threads (default 1: be a good neighbour)")
    train.add_argument("--dtype", default="float32")
    add_device_argument(train)
    train.add_argument("--out", help="heads file (default <cache>/heads/<model>-<corpus>-h<h>.pt)")
    train.set_defaults(func=_train)

    lister = sub.add_parser("list", help="heads files in the cache")
    lister.set_defaults(func=_list)
    info = sub.add_parser("info", help="what a heads file was trained for and how well")
    info.add_argument("path")
    info.set_defaults(func=_info)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])


def _train(args) -> int:
    import torch

    from multidraft.errors import InvalidOptionError
    from multidraft.blockwise.heads_data import build_hidden_cache, load_hidden_cache
    from multidraft.blockwise.heads_store import default_heads_path
    from multidraft.blockwise.heads_train import TrainConfig, train_heads
    from multidraft.models.loader import load_model
    from multidraft.models.threads import check_thread_count

    if args.tokens < 1024:
        raise InvalidOptionError(f"--tokens must be >= 1024, got {args.tokens}")
    config = TrainConfig(num_heads=args.num_heads, ffn_size=args.ffn_size, shortlist_size=args.shortlist,
                         labels=args.labels, lr=args.lr, batch_size=args.batch_size, minutes=args.minutes).validate()
    if args.out:
        check_output_file(args.out, "--out")
    torch.set_num_threads(check_thread_count(args.threads, auto=False))
    lm = load_model(args.model, dtype=args.dtype, device=args.device)
    corpora = list(args.corpus)
    folder = build_hidden_cache(lm, corpora, args.tokens, args.seq_len)
    data = load_hidden_cache(folder)
    out = Path(args.out) if args.out else default_heads_path(lm.name, "+".join(corpora), args.num_heads)
    print(f"training {args.num_heads - 1} heads on {len(data['tokens']):,} positions for {args.minutes:g} min -> {out}")
    history = train_heads(lm, data, config, out, corpus="+".join(corpora), data_tokens=int(len(data["tokens"])))
    acc = ", ".join(f"head {i + 2}: {a:.3f}" for i, a in enumerate(history["final_val_acc"]))
    print(f"wrote {out} (+ .png curve, .json history): {history['steps']} steps in "
          f"{history['train_seconds'] / 60:.1f} min; validation top-1 {acc}")
    return 0


def _list(args) -> int:
    from multidraft.blockwise.heads_store import heads_dir, list_heads

    rows = list_heads()
    if not rows:
        print(f"no heads in {heads_dir()}; train some with `multidraft heads train --model ALIAS --corpus NAME`")
    for path, meta in rows:
        if not meta:
            print(f"{path.name}: unreadable")
            continue
        print(f"{path.name}: {meta.get('base_model')} h={meta.get('num_heads')} corpus={meta.get('corpus')} "
              f"labels={meta.get('labels')} steps={meta.get('steps')} val top-1={meta.get('final_val_acc')}")
    return 0


def _info(args) -> int:
    from multidraft.blockwise.heads_store import describe

    print(describe(args.path))
    return 0
