"""`multidraft bench agentic run` (all three tasks, --prefix-cache) with every cost-table sample logged as
[seconds since start, rows, step seconds]. Usage: PYTHONPATH=src python trace_run.py TRACE.jsonl OUT_DIR"""
import sys, time, json
from multidraft.decoders import draft_length as D
T0 = time.perf_counter()
sink = open(sys.argv[1], "w")
orig = D.ForwardCosts.record
def record(self, n, s):
    sink.write(json.dumps([round(time.perf_counter() - T0, 3), n, s]) + "\n"); sink.flush()
    return orig(self, n, s)
D.ForwardCosts.record = record
from multidraft.cli import main
sys.argv = ["multidraft", "bench", "agentic", "run", "--model", "qwen2.5-coder-1.5b", "--runner", "auto", "--threads", "2",
  "--episodes", "1", "--max-new-tokens", "256", "--prefix-cache", "--rows", "greedy,suffix,pld_plus,llama_cpp_greedy",
  "--out", sys.argv[2]]
main()
