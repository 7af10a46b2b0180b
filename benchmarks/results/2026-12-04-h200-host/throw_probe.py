"""Does a refused call of the 8-bit kernel raise (RuntimeError) or crash? PATH: a path name, or 'default'.

On the H200 host (torch 2.11+cu130, g++ 13.3) the composed-message refusal crashed on every path; a one-literal
refusal (test_many_matrices_refuse_mixed_activation_blocks...) raised. The literal one runs first here, so the next
run tells the two apart."""
import faulthandler
import sys

import numpy as np
import torch

from multidraft.models import gguf_kernels
from tests.tiny_gguf import random_blocks

faulthandler.enable()
assert gguf_kernels.load(progress=False)
path = sys.argv[1]
blocks = torch.from_numpy(random_blocks("Q5_K", 16, 768, np.random.default_rng(0), scale=0.05))
x = torch.randn(9, 768)
cases = (("one-literal message (input width)", x[:, :512], 13),
         ("composed message (Q5_K_X8 given plain blocks)", x, gguf_kernels.Q5_K_X8))
for name, rows, type_id in cases:
    try:
        if path == "default":
            gguf_kernels.linear_q8(rows, blocks, type_id, 768)
        else:
            gguf_kernels.linear_q8_on(rows, blocks, type_id, 768, path)
        print(path, name, "-> no error", flush=True)
    except RuntimeError as error:
        print(path, name, "-> RuntimeError:", str(error).splitlines()[0][:90], flush=True)
