#!/usr/bin/env bash
# The GPU measurements of docs/gpu.md in one command, for the lent H200 host (see docs/gpu.md, "How to
# reproduce"): run from the repository root with .device/ and .bench_data/ carried, results under $OUT.
#
#   1. benchmarks/run.py --gpu: 1 M simulated 100 bp reads (single-end) and 500 k pairs on chr20,
#      peanut-py (mode best) against bwa mem and minimap2 -ax sr, all with every core, same run;
#   2. peanut map --align-on device on the same single-end reads: time, and SAM identical to --align-on cpu;
#   3. benchmarks/affine_kernel.py: alignments/s of the final alignment on the CPU vs kernels/affine.cl.
# SETS, READS, THREADS, PAIRS override the defaults; SKIP_ALIGN=1 stops after step 1.
set -uo pipefail
OUT=${OUT:-benchmarks/results}
READS=${READS:-1000000}
THREADS=${THREADS:-$(nproc)}
source .device/env.sh || exit 1
python3 -m pip install -q --no-deps --no-build-isolation . || exit 1
python3 setup.py build_ext --inplace -q >/dev/null || exit 1

python3 benchmarks/run.py --gpu --data .bench_data --genome chr20 --sets "${SETS:-sim100se,sim100pe}" \
  --tools peanut-best,bwa,minimap2 --reads "$READS" --reps 1 --razers-reads 0 --timeout 150 --keep-sam \
  --no-plots --results "$OUT" --machine h200 -t "$THREADS" 2>&1 | tail -40

[ -n "${SKIP_ALIGN:-}" ] && exit 0
index=$(ls benchmarks/work/index/peanut-*/ref.peanut.h5 | head -1)
reads=$(ls -d benchmarks/work/reads/sim100se-* | head -1)
for where in cpu device; do
  /usr/bin/time -f "$where: %e s wall, %M KB peak" peanut map "$index" "$reads/r1.fq" -t "$THREADS" \
    --align-on "$where" -o "/tmp/align-$where.sam" 2>&1 | tail -3
done | tee "$OUT/align-on.txt"
if [ ! -s /tmp/align-cpu.sam ] || [ ! -s /tmp/align-device.sam ]; then
  echo "align-on cpu and device: a run FAILED" | tee -a "$OUT/align-on.txt"
elif cmp -s <(grep -v '^@PG' /tmp/align-cpu.sam) <(grep -v '^@PG' /tmp/align-device.sam); then
  echo "align-on cpu and device: identical SAM" | tee -a "$OUT/align-on.txt"
else
  echo "align-on cpu and device: SAM DIFFERS" | tee -a "$OUT/align-on.txt"
fi
python3 benchmarks/affine_kernel.py --pairs "${PAIRS:-200000}" 2>&1 | tail -12 | tee "$OUT/affine-kernel.md"
