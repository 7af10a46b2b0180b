#!/bin/bash
# The device machine's host CPU: issue 42's forward-cost curve on every ISA path it has, on a stand-in of
# qwen2.5-coder-1.5b (stand_in.py: random blocks, the real formats and shapes), then the int8 kernels' bit-identity
# tests. Run from the repository root with the wheels in .whl/ and the stand-in's pack in .devwork/pack (README.md).
set -u
DIR=benchmarks/results/2026-12-04-h200-host
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
start=$(date +%s)
{ lscpu; grep -m1 flags /proc/cpuinfo; nproc; free -g; uptime; g++ --version | head -1; } > "$OUT/machine.txt" 2>&1
for f in avx2 avx512_vnni avx_vnni amx_int8; do grep -qw $f /proc/cpuinfo && echo "$f yes" || echo "$f no"; done \
    | tee -a "$OUT/machine.txt"
grep -m1 "Model name" "$OUT/machine.txt"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
export PYTHONPATH=/tmp/site:src:. MULTIDRAFT_HOME=/tmp/mdhome HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python3 "$DIR/stand_in.py" unpack .devwork/pack || exit 1
echo "unpacked at $(( $(date +%s) - start )) s"
timeout 330 python3 "$DIR/fc.py" --model qwen2.5-coder-1.5b --runners native --isa all --chains 1,2,4,8,16,32 --threads 2 \
    --reps 7 --json "$OUT/forward_cost.json" > "$OUT/forward_cost.log" 2>&1
echo "forward-cost rc=$? at $(( $(date +%s) - start )) s"
tail -20 "$OUT/forward_cost.log"
timeout 180 python3 "$DIR/crossover.py" --json "$OUT/crossover.json" > "$OUT/crossover.log" 2>&1   # VNNI or tiles?
echo "crossover rc=$? at $(( $(date +%s) - start )) s"
grep -E "wins|overlapped" "$OUT/crossover.log"
for path in avx2 scalar avx512-vnni amx default; do       # a refused call: RuntimeError, or a crash?
    timeout 60 python3 "$DIR/throw_probe.py" $path >> "$OUT/throw_probe.log" 2>&1 || echo "$path: rc=$?" >> "$OUT/throw_probe.log"
done
cat "$OUT/throw_probe.log" | grep -v "^  File\|^Extension\|^$" | head -30
left=$(( 470 - ($(date +%s) - start) ))
if [ $left -gt 60 ]; then     # the bit-identity tests without the ones that expect a refusal (the probe above)
    timeout $left python3 -m pytest -q -p no:cacheprovider tests/test_int8_kernels.py \
        -k "not refused and not fifth_bit and not crash" > "$OUT/pytest_int8.log" 2>&1
    echo "pytest rc=$? at $(( $(date +%s) - start )) s"
    tail -5 "$OUT/pytest_int8.log"
fi
