"""Q2_K_X8 on the amx-emulated path against the scalar reference of its Q2_K blocks, 16 outputs x 256, one row:
which outputs differ, with the mins as they are and with them changed (the sanitized build of make test-sanitize
showed outputs 8-14 wrong before 62ce7a6). Usage: PYTHONPATH=src:. python q2_min_terms.py (with make test-sanitize's
MULTIDRAFT_KERNEL_CFLAGS, LD_PRELOAD and ASAN_OPTIONS for that build)."""
import numpy as np
import torch

from multidraft.models import gguf_kernels as g
from tests.tiny_gguf import random_blocks
g.load(progress=False)
torch.set_num_threads(1)
rng = np.random.default_rng(5)
blocks = torch.from_numpy(random_blocks("Q2_K", 16, 256, rng, scale=0.05)).view(16, 84)
x = torch.randn(1, 256)
def diff(b):
    b = b.contiguous()
    return (g.linear_q8_on(x, g.repack_q2_k_x8(b), g.Q2_K_X8, 256, "amx-emulated") != g.linear_q8_on(x, b, 10, 256, "scalar")).nonzero()[:, 1].tolist()
print("as they are:", diff(blocks))
b = blocks.clone(); b[:, :16] &= 0x0F; print("every min 0:", diff(b))
b = blocks.clone(); b[8:16, :16] = (b[8:16, :16] & 0x0F) | (b[0:8, :16] & 0xF0); print("group 1 mins = group 0's:", diff(b))
b = blocks.clone(); b[8:16, :16] = (b[8:16, :16] & 0x0F) | (b[0:8, :16] & 0xF0).roll(1, 0); print("group 1 mins = group 0's rolled:", diff(b))
b = blocks.clone(); b[:, 82:84] = b[0:1, 82:84]; print("one dmin for all rows:", diff(b))
b = blocks.clone(); b[:, :16] = (b[:, :16] & 0x0F) | (b[:, 0:1] & 0xF0); print("each row one min value:", diff(b))
