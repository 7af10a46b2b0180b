"""Default runner on a GGUF: load time, a hash of the logits of a 9-token prefill and of 8 then 1 decoded rows, and
48 greedy tokens."""
import hashlib, sys, time
import torch
import multidraft
t = time.time()
lm = multidraft.load_model(sys.argv[1], runner="auto")
print("load s", round(time.time() - t, 1), "runner", lm.runner)
h = hashlib.sha256()
cache = lm.new_cache()
for chunk in ([151643, 785, 3974, 13876, 38835, 34208, 916, 279, 15678], [11, 220, 17, 18, 19, 20, 21, 22], [23]):
    with torch.inference_mode():
        logits = lm.forward(cache, chunk).logits
    h.update(logits.float().contiguous().numpy().tobytes())
print("logits", h.hexdigest()[:16])
out = multidraft.generate(lm, "def quicksort(items):", method="greedy", max_new_tokens=48)
print("tokens", hashlib.sha256(str(list(out.token_ids)).encode()).hexdigest()[:16], repr(out.text[:60]))
