# usage: PYTHONPATH=src python engine_long.py
"""8 requests decoded together (multidraft.generate_batch, max_num_seqs 8, greedy, 64 new tokens) on prompts of
~1000 tokens (agent-episode prompts), the 1.5B, 2 threads: wall time of the batch and of its decode steps alone
(the batch minus the same requests' prefills, measured as 1-token requests)."""
import time, torch
import multidraft
from multidraft.eval.tasks import load_task
torch.set_num_threads(2)
lm = multidraft.load_model("qwen2.5-coder-1.5b")
prompts = []
for name in ("agent_fix", "agent_edit", "agent_chat"):
    for p in load_task(name):
        prompts.append(p.turn_messages(0, []) if p.num_turns > 1 else p.input)
prompts = prompts[:8]
multidraft.generate_batch(lm, prompts[:2], max_new_tokens=4)            # warm-up
t0 = time.perf_counter(); multidraft.generate_batch(lm, prompts, max_new_tokens=1); prefill = time.perf_counter() - t0
t0 = time.perf_counter(); out = multidraft.generate_batch(lm, prompts, max_new_tokens=64); whole = time.perf_counter() - t0
print(f"batch of 8 x 64 tokens {whole:.2f} s, prefills {prefill:.2f} s, decode {whole - prefill:.2f} s "
      f"({(whole - prefill) / 63 * 1e3:.1f} ms a step), tokens {sum(len(o.token_ids) for o in out)}")
