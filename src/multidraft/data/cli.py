"""`multidraft data pull NAME...|all` and `multidraft data list`."""

from multidraft.data.registry import DATASETS


def _pull(args) -> int:
    from multidraft.data.store import pull

    names = list(DATASETS) if "all" in args.names else args.names
    for name in names:
        pull(name, progress=not args.quiet, force=args.force)
    return 0


def _list(args) -> int:
    from multidraft.data.store import is_pulled, path

    for name, dataset in DATASETS.items():
        where = str(path(name)) if is_pulled(name) else "not pulled"
        print(f"{name:15} {dataset.kind:6} {where}\n{'':15} {dataset.description}")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser("data", help="pull and list data sets and corpora")
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION")
    pull = sub.add_parser("pull", help="download, verify (sha256) and unpack data sets into the cache")
    pull.add_argument("names", nargs="+", metavar="NAME", choices=[*DATASETS, "all"],
                      help="data set names, or `all`: " + ", ".join(DATASETS))
    pull.add_argument("--force", action="store_true", help="unpack again even if already pulled")
    pull.add_argument("--quiet", action="store_true")
    pull.set_defaults(func=_pull)
    listing = sub.add_parser("list", help="show known data sets and where they are cached")
    listing.set_defaults(func=_list)
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])
