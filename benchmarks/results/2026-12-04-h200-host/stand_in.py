"""A stand-in for a pulled GGUF model on a machine its 1 GB file cannot reach (the device machine takes 64 MiB a call).

`pack ALIAS DIR`: copies the pulled alias's small files (config, tokenizer, the 1-D tensors) and the list of its
GGUF matrices (name, block format, shape) into DIR, a few MB. `unpack DIR`: writes, under MULTIDRAFT_HOME, a cache
entry for the same alias whose source.gguf holds random blocks of the same formats and shapes (the real norms and
biases), so the forward costs what the real model's forward costs: the kernels' work depends on the formats and
shapes, never on the values. Its outputs are noise; time with it, never judge acceptance or text.

Run from the repository root: PYTHONPATH=src:. python benchmarks/results/2026-12-04-h200-host/stand_in.py ...
"""

import json
import shutil
import sys
from pathlib import Path

import gguf
import numpy as np
import torch
from safetensors.torch import load_file, save_file

from multidraft.models import model_store
from multidraft.models.registry import get_spec
from tests.tiny_gguf import random_blocks

SMALL_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "chat_template.jinja")
KEYS = ("block_count", "context_length", "embedding_length", "feed_forward_length", "attention.head_count",
        "attention.head_count_kv")


def pack(alias: str, out: Path) -> None:
    folder = model_store.require_alias(alias)
    out.mkdir(parents=True, exist_ok=True)
    for name in SMALL_FILES:
        if (folder / name).is_file():
            shutil.copy(folder / name, out / name)
    reader = gguf.GGUFReader(str(folder / model_store.SOURCE_GGUF))
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    keys = {key: int(reader.fields[f"{arch}.{key}"].parts[-1][0]) for key in KEYS}
    tensors, dense = [], {}
    for tensor in reader.tensors:
        if tensor.tensor_type.name == "F32":
            dense[tensor.name] = torch.from_numpy(np.array(tensor.data, dtype=np.float32))
        # GGUF lists shapes innermost first: (width, rows)
        tensors.append({"name": tensor.name, "type": tensor.tensor_type.name,
                        "shape": [int(n) for n in tensor.shape]})
    # the HF folder's 1-D tensors: the quantized runner reads norms and biases from it
    # (a pull since 2026-12-05 keeps them in the reference part, gguf_to_hf.REFERENCE_FILE)
    weights = folder / ("reference.safetensors" if (folder / "reference.safetensors").is_file() else "model.safetensors")
    small = {name: value for name, value in load_file(str(weights)).items() if value.dim() == 1}
    save_file(small, str(out / "model.safetensors"))
    save_file(dense, str(out / "gguf_dense.safetensors"))
    (out / "spec.json").write_text(json.dumps({"alias": alias, "arch": arch, "keys": keys, "tensors": tensors}))


def unpack(pack_dir: Path) -> Path:
    spec = json.loads((pack_dir / "spec.json").read_text())
    alias, arch = spec["alias"], spec["arch"]
    folder = model_store.entry_dir(alias)
    folder.mkdir(parents=True, exist_ok=True)
    for name in SMALL_FILES + ("model.safetensors",):
        if (pack_dir / name).is_file():
            shutil.copy(pack_dir / name, folder / name)
    dense = load_file(str(pack_dir / "gguf_dense.safetensors"))
    rng = np.random.default_rng(0)
    writer = gguf.GGUFWriter(str(folder / model_store.SOURCE_GGUF), arch)
    for key, value in spec["keys"].items():
        writer.add_uint32(f"{arch}.{key}", value)
    for tensor in spec["tensors"]:
        if tensor["type"] == "F32":
            writer.add_tensor(tensor["name"], dense[tensor["name"]].numpy())
            continue
        width, rows = tensor["shape"]
        # scales of 1e-4..3e-4: weights of at most ~0.3, so 28 layers of noise stay finite
        raw = random_blocks(tensor["type"], rows, width, rng, scale=3e-4)
        writer.add_tensor(tensor["name"], raw, raw_dtype=gguf.GGMLQuantizationType[tensor["type"]])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    model_store.write_marker(folder, source_sha256=get_spec(alias).gguf_sha256,
                             stand_in="random blocks in the real model's formats and shapes (stand_in.py)")
    return folder


if __name__ == "__main__":
    if sys.argv[1:2] == ["pack"] and len(sys.argv) == 4:
        pack(sys.argv[2], Path(sys.argv[3]))
    elif sys.argv[1:2] == ["unpack"] and len(sys.argv) == 3:
        print(unpack(Path(sys.argv[2])))
    else:
        sys.exit(__doc__)
