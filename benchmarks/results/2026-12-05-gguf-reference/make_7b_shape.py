"""A Qwen2.5-7B-shaped GGUF (random Q4_K/Q6_K blocks, the 1.5B's metadata and tokenizer, 7B dimensions)."""
import sys
from pathlib import Path
import numpy as np
import gguf
from gguf import GGUFReader, GGUFWriter, GGUFValueType
sys.path.insert(0, "/work/main")
from tests.tiny_gguf import random_blocks

src = GGUFReader(str(Path.home() / ".cache/multidraft/models/qwen2.5-coder-1.5b/source.gguf"))
out = GGUFWriter(sys.argv[1], "qwen2")
dims = {"qwen2.embedding_length": 3584, "qwen2.feed_forward_length": 18944, "qwen2.attention.head_count": 28,
        "qwen2.attention.head_count_kv": 4}
for field in src.fields.values():
    if field.name.startswith("GGUF.") or field.name == "general.architecture":
        continue
    vtype = field.types[0]
    value = dims.get(field.name, field.contents())
    out.add_key_value(field.name, value, vtype, sub_type=field.types[-1] if vtype == GGUFValueType.ARRAY else None)
resize = {1536: 3584, 8960: 18944, 256: 512}
rng = np.random.default_rng(0)
total = 0
for tensor in src.tensors:
    shape = [resize.get(int(n), int(n)) for n in tensor.shape]      # gguf order: width first
    kind = tensor.tensor_type.name
    if kind == "F32":
        values = (1.0 + 0.05 * rng.standard_normal(shape[::-1])).astype(np.float32)
        out.add_tensor(tensor.name, values)
    else:
        data = random_blocks(kind, shape[1], shape[0], rng, 0.02 / 8)
        out.add_tensor(tensor.name, data, raw_dtype=tensor.tensor_type)
    total += int(np.prod(shape))
print("parameters", total)
out.write_header_to_file(); out.write_kv_data_to_file(); out.write_tensors_to_file(); out.close()
