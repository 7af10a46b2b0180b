"""The command line's argument parser class, in a module of its own so that the preset modules (imported by the
command groups that cli.py imports) can build their parsers without importing cli.py."""

import argparse


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (what is wrong and where to look) and exit status 2.

    Sub-command parsers inherit this class (add_subparsers builds them with the parent's class)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")
