"""Replay the logged cost trace through the old and new tables with each step's seconds doubled at probability P
(seeded); print each table's relative costs at the end, and how often each size was measured.
Usage (from the repository root): python replay_spikes.py TRACE.jsonl P SEEDS [OLD_DRAFT_LENGTH_PY]"""
import json, sys, random, importlib.util, collections
sys.path.insert(0, "src")
spec = importlib.util.spec_from_file_location("old_dl", sys.argv[4] if len(sys.argv) > 4 else "/tmp/old_draft_length.py")
old = importlib.util.module_from_spec(spec); spec.loader.exec_module(old)
from multidraft.decoders import draft_length as new
trace = [json.loads(l) for l in open(sys.argv[1])]
p = float(sys.argv[2])
sizes = [1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32]
counts = collections.Counter(n for _, n, _ in trace)
print("samples per size:", dict(sorted(counts.items())))
for seed in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3):
    rng = random.Random(seed)
    a, b = old.ForwardCosts(), new.ForwardCosts()
    for t, n, s in trace:
        s = s * 2 if rng.random() < p else s
        a.record(n, s); b.record(n, s)
    print(f"seed {seed} rows " + " ".join(f"{k:5d}" for k in sizes))
    print("       old  " + " ".join(f"{a.relative(k):5.2f}" for k in sizes))
    print("       new  " + " ".join(f"{b.relative(k):5.2f}" for k in sizes))
