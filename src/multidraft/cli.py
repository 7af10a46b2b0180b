"""The `multidraft` command line.

Each command group lives in its own module that exposes `register(subparsers)`; the parser it adds
sets `func(args) -> int`. User errors (MultidraftError) print one line and exit with status 2.
"""

import argparse
import importlib
import sys

from multidraft.errors import MultidraftError

# Modules that add sub-commands. A module that is not there yet is skipped, so groups land independently.
COMMAND_MODULES = [
    "multidraft.models.cli",
    "multidraft.generate_cli",
    "multidraft.data.cli",
    "multidraft.ngram.cli",
    "multidraft.pldplus.cli",
    "multidraft.server.cli",
    "multidraft.eval.bench_cli",
    "multidraft.blockwise.cli",
]


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what is wrong and where to look) and exit status 2.

    Sub-command parsers inherit this class (add_subparsers builds them with the parent's class)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="multidraft", description="Draft-based decoding for causal language models.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
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
