"""`multidraft bench forward-cost ARGS` without the CLI's other commands (the device image has no fastapi)."""
import argparse
import sys

from multidraft.eval import forward_cost_cli

parser = argparse.ArgumentParser()
forward_cost_cli.register(parser.add_subparsers())
args = parser.parse_args(["forward-cost"] + sys.argv[1:])
sys.exit(args.func(args))
