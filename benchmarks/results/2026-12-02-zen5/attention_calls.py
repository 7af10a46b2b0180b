"""attention_with alone, warm: smollm2, the 1.5B and gemma3 shapes, 1 row over 301 and 1001 keys and 8 rows over 308,
the default schedule, AVX-512 two heads at once. Usage: python attention_calls.py THREADS REPS"""
import time, torch, statistics, sys
import multidraft
from multidraft.models import gguf_kernels as g
g.load()
ops = torch.ops.multidraft_gguf
ops.set_attention_wide(True)
torch.set_num_threads(int(sys.argv[1]))
torch.manual_seed(0)
for name, H, KVH, D in (("smollm2", 9, 3, 64), ("1.5b", 12, 2, 128), ("gemma3", 4, 1, 256)):
  for S, T in ((301, 1), (1001, 1), (308, 8)):
    q = torch.randn(H, T, D); k = torch.randn(KVH, S, D); v = torch.randn(KVH, S, D)
    vis = torch.ones(T, S, dtype=torch.bool).tril(S - T)
    ts = []
    for rep in range(int(sys.argv[2])):
      t = time.perf_counter()
      for l in range(50): ops.attention_with(q, k, v, vis, 0.125, 0, 0)
      ts.append((time.perf_counter() - t) / 50 * 1e6)
    print("%-8s S %4d T %d: min %6.2f median %6.2f us" % (name, S, T, min(ts), statistics.median(ts)))
