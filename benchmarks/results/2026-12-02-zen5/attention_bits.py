"""The attention's outputs on 128 cases (8 shapes, 4 masks, default and explicit schedules, one and two heads at
once) saved to FILE and their sha256 printed: run with the old and the new kernels to compare bits.
Usage: python attention_bits.py FILE"""
import torch, sys, hashlib
import multidraft
from multidraft.models import gguf_kernels as g
g.load(); ops = torch.ops.multidraft_gguf
gen = torch.Generator().manual_seed(11)
outs = []
for wide in (False, True):
    ops.set_attention_wide(wide)
    for heads, kvh, rows, keys, dim in ((12, 2, 3, 150, 128), (9, 3, 2, 301, 64), (4, 1, 2, 77, 256), (6, 3, 3, 70, 36),
                                        (8, 2, 1, 9, 80), (14, 2, 5, 33, 72), (9, 3, 8, 1000, 64), (12, 2, 8, 333, 128)):
        q = torch.randn(heads, rows, dim, generator=gen) * 3
        k, v = torch.randn(kvh, keys, dim, generator=gen), torch.randn(kvh, keys, dim, generator=gen)
        for mask in ("all", "tril", "rand", "runs"):
            if mask == "all": vis = torch.ones(rows, keys, dtype=torch.bool)
            elif mask == "tril": vis = torch.ones(rows, keys, dtype=torch.bool).tril(keys - rows)
            elif mask == "rand": vis = torch.rand(rows, keys, generator=gen) < 0.7
            else:
                vis = torch.zeros(rows, keys, dtype=torch.bool); vis[:, 3:keys // 2] = True; vis[:, keys - 5:] = True
            outs.append(ops.attention(q, k, v, vis, 0.09))
            outs.append(ops.attention_with(q, k, v, vis, 0.09, 8, 2))
torch.save(outs, sys.argv[1])
print(hashlib.sha256(b"".join(o.numpy().tobytes() for o in outs)).hexdigest())
