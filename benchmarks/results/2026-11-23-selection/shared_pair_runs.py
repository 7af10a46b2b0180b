"""Run selection_token_rate.py and mtad_paper.py side by side on ONE loaded copy of a target/draft pair.

    PYTHONPATH=src:benchmarks .venv/bin/python benchmarks/results/2026-11-23-selection/shared_pair_runs.py \
        --model qwen2.5-coder-1.5b --draft-model qwen2.5-coder-0.5b \
        --selection "--prompts 2 --tokens 32 --ks 2 3 4 5 6 --json a.json" --selection-log a.log \
        --mtad "real --prompts 2 --tokens 24 --only 'Fig. 3' --json b.json" --mtad-log b.log

Why: the Qwen pair in fp32 takes ~10 GB of private memory per process (the files are bf16, so every process
converts its own copy), and this 24 GB machine cannot hold two copies beside the other agents' work. The pair is
loaded once, then the process forks: the child runs mtad_paper's main, the parent selection_token_rate's main.
The weights are never written after loading, so the two processes share their pages copy-on-write. The prompts
alternate between the tasks (HumanEval, chat, HumanEval, ...), so a run stopped early covers both. Each script
sees the usual command line (its --model / --draft-model are set to the shared pair's names) and measures its own
process CPU time, so the token-rate timing is unchanged.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import traceback
from pathlib import Path

import torch

import multidraft
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "2026-11-23-mtad"))    # mtad_paper.py
import mtad_paper  # noqa: E402
import selection_token_rate


def redirect_output(log_path: str) -> None:
    """Point this process's stdout and stderr at `log_path` (line-buffered, so progress shows while it runs)."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout.reconfigure(line_buffering=True)


def run_script(module, script_args: str, log_path: str, model: str, draft_model: str) -> None:
    redirect_output(log_path)
    sys.argv = [module.__file__, *shlex.split(script_args), "--model", model, "--draft-model", draft_model]
    print("args:", " ".join(sys.argv[1:]), flush=True)
    module.main()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True)
    parser.add_argument("--draft-model", required=True)
    parser.add_argument("--selection", required=True, help="selection_token_rate.py arguments (one string)")
    parser.add_argument("--selection-log", required=True)
    parser.add_argument("--mtad", required=True, help="mtad_paper.py arguments (one string)")
    parser.add_argument("--mtad-log", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)

    target = multidraft.load_model(args.model, dtype=torch.float32)
    draft = multidraft.load_model(args.draft_model, dtype=torch.float32)

    def shared_pair(script_args):
        texts = mtad_paper.real_prompt_texts(script_args.prompts)     # n HumanEval prompts, then n chat prompts
        count = script_args.prompts
        # alternate the tasks (HumanEval 0, chat 0, HumanEval 1, ...): a run stopped early still covers both
        texts = [text for pair in zip(texts[:count], texts[count:]) for text in pair]
        return target, draft, [target.encode(t)[-256:] for t in texts]

    # both scripts get their pair through this one function: hand them the loaded one
    mtad_paper.real_pair_and_prompts = shared_pair
    selection_token_rate.real_pair_and_prompts = shared_pair

    child = os.fork()
    if child == 0:
        code = 0
        try:
            run_script(mtad_paper, args.mtad, args.mtad_log, args.model, args.draft_model)
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            os._exit(code)        # never return into the parent's code path
    run_script(selection_token_rate, args.selection, args.selection_log, args.model, args.draft_model)
    _, status = os.waitpid(child, 0)
    print(f"mtad child exited with status {status}", flush=True)


if __name__ == "__main__":
    main()
