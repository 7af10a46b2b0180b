import time, torch
from multidraft.models.loader import load_model
from multidraft.models import gguf_kernels
lm = load_model('gemma3-270m', runner='native')
f = lm.runner_object.native
c = lm.new_cache(); lm.forward(c, list(range(100, 140)))
orig_head = f._head; t_head = []
def head(*a):
    t = time.perf_counter(); r = orig_head(*a); t_head.append(time.perf_counter() - t); return r
f._head = head
orig_stack = gguf_kernels.decoder_stack; t_stack = []
def stack(*a):
    t = time.perf_counter(); r = orig_stack(*a); t_stack.append(time.perf_counter() - t); return r
gguf_kernels.decoder_stack = stack
for i in range(20): lm.forward(c, [5], logits_rows=slice(-1, None)); c.crop(40)
t_head.clear(); t_stack.clear()
tt = []
gguf_kernels.linear_time(True)
for i in range(200):
    t = time.perf_counter(); lm.forward(c, [5], logits_rows=slice(-1, None)); tt.append(time.perf_counter() - t); c.crop(40)
lin = gguf_kernels.linear_time(False) / 1e6 / 200
med = lambda v: sorted(v)[len(v)//2] * 1000
print(f"forward {med(tt):.2f} ms; stack {med(t_stack):.2f}; head {med(t_head):.2f}; rest {med(tt)-med(t_stack)-med(t_head):.2f}; linears (kernel clock) {lin:.2f} ms")
