#!/usr/bin/env bash
# GPU memory configurations of docs/gpu.md in one command, for the lent H200 host (carry .device/ and
# .bench_data/, results under $OUT): the same 1 M simulated 100 bp reads on chr20 mapped as on a 2 GB, an
# 8 GB and the whole 140 GB device (peanut map --memory-cap), single-end, accuracy scored against the truth,
# and the three SAMs compared (they must be identical).
set -uo pipefail
OUT=${OUT:-benchmarks/results}
READS=${READS:-1000000}
source .device/env.sh || exit 1
python3 -m pip install -q --no-deps --no-build-isolation . || exit 1

for cap in 2G 8G none; do
  args=""
  [ "$cap" != none ] && args="--memory-cap $cap"
  python3 benchmarks/run.py --gpu --data .bench_data --genome chr20 --sets sim100se --tools peanut-best \
    --reads "$READS" --reps 1 --razers-reads 0 --timeout 200 --keep-sam --no-plots --results "$OUT/cap-$cap" \
    --machine "h200-cap-$cap" --peanut-args "$args" 2>&1 | grep -E "^\| (peanut|tool|---)" | head -3
  sam=$(ls -t benchmarks/work/runs/*/sim100se/peanut-best.sam | head -1)
  grep -v '^@PG' "$sam" > "/tmp/cap-$cap.sam"
  log=$(ls -t benchmarks/work/runs/*/sim100se/peanut-best.log | head -1)
  grep -E "reads in|stage seconds|streamed|resident" "$log" | sed "s/^/[$cap] /"
done 2>&1 | tee "$OUT/memory-caps.txt"
for cap in 2G 8G; do
  if cmp -s "/tmp/cap-$cap.sam" /tmp/cap-none.sam; then echo "cap $cap: SAM identical to the whole device"
  else echo "cap $cap: SAM DIFFERS"; fi
done | tee -a "$OUT/memory-caps.txt"
