"""The layer steps' ops alone at 1, 8, 16 rows (or the rows given: `steps_ops.py 1,16,141`; the 1.5B's shapes), 2
threads, min of 5 x 200 calls each, us per call."""
import sys, time, torch
from multidraft.models import gguf_kernels as g
g.load(progress=False)
torch.set_num_threads(2)
ops = torch.ops.multidraft_gguf
def best(f, n=200):
    f(); r = 1e9
    for _ in range(5):
        s = time.perf_counter()
        for _ in range(n): f()
        r = min(r, (time.perf_counter() - s) / n)
    return r * 1e6
for T in [int(r) for r in (sys.argv[1] if len(sys.argv) > 1 else "1,8,16").split(",")]:
    x, b, w = torch.randn(1, T, 1536), torch.randn(1, T, 1536), torch.randn(1536)
    gate, up = torch.randn(1, T, 8960), torch.randn(1, T, 8960)
    q, k, v = torch.randn(1, T, 1536), torch.randn(1, T, 256), torch.randn(1, T, 256)
    cos, sin = torch.randn(T, 128), torch.randn(T, 128)
    keys, values = torch.zeros(1, 2, 512, 128), torch.zeros(1, 2, 512, 128)
    norm = best(lambda: ops.add_rms_norm(x, b, w, 1e-6))
    rot = best(lambda: ops.rotary_store(q, k, v, cos, sin, keys, values, 300, None))
    silu = best(lambda: ops.silu_mul(gate, up))
    torch_silu = best(lambda: torch.nn.functional.silu(gate))
    print(f"T={T:2d}: add_rms_norm {norm:.1f}, rotary_store {rot:.1f}, silu_mul {silu:.1f} (at::silu alone {torch_silu:.1f});"
          f" a layer's steps ~{2 * norm + rot + silu:.0f} us, x28 = {28 * (2 * norm + rot + silu) / 1e3:.2f} ms")
