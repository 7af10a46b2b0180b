"""The `multidraft` command line.

Each command group lives in its own module that exposes `register(subparsers)`; the parser it adds
sets `func(args) -> int`. User errors (MultidraftError) print one line and exit with status 2.
"""

import argparse
import sys

from multidraft import generate_cli
from multidraft.cli_parser import OneLineErrorParser
from multidraft.blockwise import cli as heads_cli
from multidraft.data import cli as data_cli
from multidraft.errors import MultidraftError
from multidraft.eval import bench_cli, check_cli
from multidraft.models import cli as models_cli
from multidraft.ngram import cli as ngram_cli
from multidraft.pldplus import cli as pldplus_cli
from multidraft.server import cli as server_cli

# The command groups, in the order `multidraft --help` lists them. Every one is imported above: a missing or
# renamed module fails at import, it never makes a command vanish.
COMMAND_MODULES = (models_cli, generate_cli, data_cli, ngram_cli, pldplus_cli, server_cli, bench_cli, check_cli,
                   heads_cli)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="multidraft", description="Draft-based decoding for causal language models.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.register(subparsers)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)     # a usage error prints one line and raises SystemExit(2)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except MultidraftError as exc:
        print(f"multidraft: error: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("multidraft: interrupted", file=sys.stderr)
        return 130


def _one_line(message: str) -> str:
    """Errors print on one line; text from elsewhere (a file, pip's output) may hold newlines or stray bytes."""
    return " ".join(message.split()).encode("utf-8", "backslashreplace").decode("utf-8")


if __name__ == "__main__":
    sys.exit(main())
