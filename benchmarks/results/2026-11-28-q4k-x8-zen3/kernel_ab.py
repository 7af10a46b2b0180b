"""Q4_K (GGUF layout) against Q4_K_X8 (packed in eights) on random 8960 x 1536 matrices: one matrix again and again
(hot: in L3) and 40 different ones in turn (cold: from memory), 1..64 input rows. Usage: PYTHONPATH=src python
kernel_ab.py THREADS."""
import time, torch, sys
from multidraft.models import gguf_kernels as g
g.load()
gen = torch.Generator().manual_seed(0)
torch.set_num_threads(int(sys.argv[1]))
K, N, mats = 1536, 8960, 40
B = [g.random_blocks(12, N, K, gen) for _ in range(mats)]
P = [g.repack_q4_k_x8(b) for b in B]
for M in (1, 2, 4, 16, 64):
    x = torch.randn(M, K)
    for cold in (0, 1):
        res = {}
        for name, ms, t in (("q4_k", B, 12), ("x8", P, 112)) * 2:
            best = 1e9
            for r in range(3 if cold else 30):
                seq = ms if cold else ms[:1] * 4
                t0 = time.perf_counter()
                for m in seq: g.linear_q8(x, m, t, K)
                best = min(best, (time.perf_counter() - t0) / len(seq))
            res[name] = min(res.get(name, 1e9), best)
        print(f"threads {sys.argv[1]} M {M} {'cold' if cold else 'hot '}: q4_k {res['q4_k']*1e6:.0f} us, x8 {res['x8']*1e6:.0f} us ({res['q4_k']/res['x8']:.2f}x); q4_k {B[0].numel()/res['q4_k']/1e9:.1f} GB/s x8 {P[0].numel()/res['x8']/1e9:.1f} GB/s")
