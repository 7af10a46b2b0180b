"""Does the quantized runner compute the same bits on another CPU? (issue 29: exact on AVX2 and AVX-512 machines)

    multidraft check quantized-bits write DIR     # tiny random models (HF folder + GGUF) in every hot format
    multidraft check quantized-bits check DIR     # on each machine: prints one JSON line per model

`check` loads each model with the quantized runner and reports, per model: the sha256 of the GGUF it read, the
sha256 of the logits of a fixed 9-token prompt (compare across machines: equal hashes = the same bits), whether a
17-token chain and a 5-node tree give the very bits of 1-token forwards (batch invariance on this CPU), and whether
`pld`, `pld_plus` and `suffix` give greedy's tokens on three prompts. It also prints the CPU's vector extensions.
The models are written once and carried, so both machines read the same files (random initialisation could differ
between torch builds).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import torch

from multidraft.eval.presets.source_tree import tests_module

MODELS = [("qwen2", "Q4_K"), ("qwen2", "Q6_K"), ("llama", "Q4_1"), ("llama", "Q8_0"), ("qwen2", "Q5_0"),
          ("llama", "BF16")]
PROMPTS = ["the cat sat on the mat and the cat sat on", "def x ( y ) : return x ( y ) + 1 if x",
           "a dog ran on the mat . a dog ran"]


def cpu_extensions() -> list[str]:
    try:
        flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return []
    return sorted(f for f in flags if f.startswith(("avx", "amx", "fma", "f16c")))


def write(root: Path) -> None:
    write_tiny_gguf = tests_module("tiny_gguf").write_tiny_gguf

    for arch, type_name in MODELS:
        folder = root / f"{arch}-{type_name}"
        folder.mkdir(parents=True, exist_ok=True)
        write_tiny_gguf(folder, arch, type_name, seed=3, tie=type_name == "Q8_0")
        print("wrote", folder)


def _digest(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor.contiguous().numpy().tobytes()).hexdigest()[:16]


def check(root: Path) -> None:
    import multidraft
    from multidraft.models import gguf_kernels
    from multidraft.models.kv_cache import KVCache
    from multidraft.models.quantized import load_quantized_model
    from multidraft.models.runner import LM
    make_tokenizer = tests_module("tiny_models").make_tokenizer

    if not gguf_kernels.load(progress=False):
        sys.exit(f"the quantized kernels cannot be built here: {gguf_kernels.unavailable_reason()}")
    print(json.dumps({"cpu": cpu_extensions(), "torch": torch.__version__, "threads": torch.get_num_threads()}))
    for arch, type_name in MODELS:
        folder = root / f"{arch}-{type_name}"
        gguf_path = folder / "model.gguf"
        lm = LM(load_quantized_model(folder, gguf_path), make_tokenizer(), name=folder.name, runner="quantized")
        prompt = [1, 5, 9, 3, 7, 22, 40, 11, 8]
        logits = lm.forward(KVCache(), prompt).logits
        steps = [4, 17, 30, 8, 12, 44, 9, 2, 60, 33, 21, 5, 6, 7, 18, 19, 25]
        alone = KVCache()
        lm.forward(alone, prompt)
        single = [lm.forward(alone, [token]).logits[0] for token in steps]
        chain_cache = KVCache()
        lm.forward(chain_cache, prompt)
        chain = lm.forward(chain_cache, steps).logits
        tree_cache = KVCache()
        lm.forward(tree_cache, prompt)
        tree = lm.forward(tree_cache, [4, 50, 17, 51, 30], parents=[-1, -1, 0, 0, 2]).logits
        lossless = {}
        for text in PROMPTS:
            greedy = multidraft.generate(lm, text, method="greedy", max_new_tokens=40, temperature=0).token_ids
            for method in ("pld", "pld_plus", "suffix"):
                got = multidraft.generate(lm, text, method=method, max_new_tokens=40, temperature=0).token_ids
                lossless[method] = lossless.get(method, True) and got == greedy
        print(json.dumps({
            "model": folder.name,
            "gguf_sha256": hashlib.sha256(gguf_path.read_bytes()).hexdigest()[:16],
            "prompt_logits_sha256": _digest(logits),
            "singles_sha256": _digest(torch.stack(single)),
            "chain_equals_singles": all(torch.equal(chain[i], single[i]) for i in range(len(steps))),
            "tree_equals_singles": bool(torch.equal(tree[0], single[0]) and torch.equal(tree[2], single[1])
                                        and torch.equal(tree[4], single[2])),
            "lossless_equal_greedy": lossless,
        }), flush=True)


def add_arguments(parser) -> None:
    parser.add_argument("action", choices=["write", "check"])
    parser.add_argument("folder", type=Path)


def run(args) -> int:
    from multidraft.errors import InvalidOptionError
    if args.action == "check" and not args.folder.is_dir():
        raise InvalidOptionError(f"{args.folder} is not a folder; first `multidraft check quantized-bits write "
                                 f"{args.folder}` (on any machine), then check it here")
    if args.action == "write":
        from multidraft.fsutil import check_output_folder
        check_output_folder(args.folder)
    (write if args.action == "write" else check)(args.folder)

