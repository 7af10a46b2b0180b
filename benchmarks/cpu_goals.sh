#!/usr/bin/env bash
# Issue 42's CPU benchmark goals, retaken in one go on the machine at hand (~45 min on 2 cores), into a new results
# folder: the forward's cost per row count and instruction-set path, 20 code edits x 128 tokens beside llama.cpp,
# the server's load curve, the agent episodes and, on an AMX CPU, the VNNI / tile crossover. Each step's command, log
# and exit status are kept; a step that fails is stated and the next one runs.
#
#     make install models-data && .venv/bin/multidraft models pull qwen2.5-coder-1.5b && make llama
#     bash benchmarks/cpu_goals.sh benchmarks/results/DATE-CPU-goals [QUICK=1]
#
# QUICK=1 (an environment variable) runs each step small (2 prompts, 16 tokens, curve 1,2): to check the script, not
# to quote. Measure on an idle machine: `uptime` is logged before each step.
set -u
OUT=${1:?usage: bash benchmarks/cpu_goals.sh OUT_FOLDER}
MD=${MULTIDRAFT:-.venv/bin/multidraft}
MODEL=qwen2.5-coder-1.5b
mkdir -p "$OUT"
if [ -n "$(ls -A "$OUT")" ]; then echo "cpu_goals: $OUT is not empty; name a new folder" >&2; exit 2; fi
if [ "${QUICK:-0}" = 1 ]; then
  CHAINS=1,8 REPS=2 LIMIT=2 TOKENS=16 CURVE=1,2 SERVE_TOKENS=16 AGENT_TOKENS=16
else
  CHAINS=1,2,4,8,16,32 REPS=7 LIMIT=20 TOKENS=128 CURVE=1,4,8 SERVE_TOKENS=64 AGENT_TOKENS=256
fi

{
  date -u; lscpu | grep -E "Model name|Vendor ID|^CPU\(s\)|CPU family|^Model:"
  for flag in avx2 avx512_vnni avx_vnni amx_int8; do
    grep -qw "$flag" /proc/cpuinfo && echo "$flag yes" || echo "$flag no"
  done
  git log --oneline -1
} > "$OUT/machine.txt"
cat "$OUT/machine.txt"

step() {   # step NAME COMMAND...: the command's line, uptime, output and exit status into NAME.log
  local name=$1; shift
  { echo "\$ $*"; echo "uptime: $(uptime)"; } > "$OUT/$name.log"
  echo "cpu_goals: $name ($(date -u +%H:%M))" >&2
  "$@" >> "$OUT/$name.log" 2>&1
  local status=$?
  echo "exit status $status; uptime: $(uptime)" >> "$OUT/$name.log"
  echo "$name $status" >> "$OUT/status.txt"
}

step forward_cost "$MD" bench forward-cost --model "$MODEL" --runners native --isa all --chains "$CHAINS" \
  --threads 2 --reps "$REPS" --json "$OUT/forward_cost.json"
step code_edit "$MD" bench --model "$MODEL" --runner auto --tasks code_edit --baseline greedy --threads 2 \
  --limit "$LIMIT" --max-new-tokens "$TOKENS" --no-progress --out "$OUT/code_edit" \
  --methods greedy,pld,pld_plus,suffix,llama_cpp_greedy,llama_cpp_prompt_lookup
step paired "$MD" bench paired "$OUT/code_edit" --method pld \
  --against "llama_cpp_greedy,suffix,pld_plus[rank_by=hidden]" --pair pld/llama_cpp_greedy \
  --pair greedy/llama_cpp_greedy --pair suffix/llama_cpp_greedy
step server_curve "$MD" bench serve load --model "$MODEL" --curve "$CURVE" --methods greedy,pld \
  --max-tokens "$SERVE_TOKENS" --requests-per-client 1 --json "$OUT/server_curve.json"
step agentic "$MD" bench agentic run --model "$MODEL" --runner auto --threads 2 --episodes 1 \
  --max-new-tokens "$AGENT_TOKENS" --prefix-cache --rows greedy,suffix,pld_plus,llama_cpp_greedy --out "$OUT/agentic"

# On an AMX CPU, where the amx path should hand each format from its VNNI kernels to its tiles (~1 min): untimed on
# AMX since the Q6_K VNNI kernel took both halves per scale step (2026-12-07).
if grep -qw amx_int8 /proc/cpuinfo; then
  if [ "${QUICK:-0}" = 1 ]; then CROSSOVER=(--copies 4 --rounds 1 --rows 1,9); else CROSSOVER=(); fi
  step amx_crossover env PYTHONPATH=src "${PYTHON:-.venv/bin/python}" \
    benchmarks/results/2026-12-04-h200-host/crossover.py --json "$OUT/amx_crossover.json" "${CROSSOVER[@]}"
fi

echo "cpu_goals: done; exit status per step in $OUT/status.txt:" >&2
cat "$OUT/status.txt" >&2
