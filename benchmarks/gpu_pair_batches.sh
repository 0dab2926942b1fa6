#!/bin/bash
# This version against an earlier one (OLD_SRC, default benchmarks/work/old) and this version with the other
# batch size (pairs: 262,144 reads instead of the default 524,288; single-end: 524,288 instead of 262,144), in
# turns, on issue 20's sets (5 M pairs 2x150 three turns, 10 M single-end 100 bp two
# turns, chr20, -t 16), then kernel_profile.py --gaps of this version on the single-end set: where the device
# sat idle. On the GPU host, in the repository root, with .device, .bench_data and OLD_SRC carried.
set -u
W=${WDIR:-/dev/shm/wb}; source "$(dirname "$0")/gpu_common.sh"
M="env MEASURE_GPU=0 python3 $R/benchmarks/measure.py"
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/old "$R/${OLD_SRC:-benchmarks/work/old}" \
  > i0.log 2>&1 &
peanut_index
simulate_pairs 5000000 8
simulate_single 10000000 8
wait; echo "prep $(( $(date +%s) - T0 )) s"
OLD="env PYTHONPATH=/tmp/old:/tmp/site python3 -m peanut_py"
head -4000 se.fq > tiny.fq; $NEW map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm.err
$OLD map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm2.err
# run NAME CMD...: the measured run, its stage seconds and its own clock
run() {
  local name=$1; shift
  $M $name "$@" | cut -c1-100; grep "stage seconds" $name.err | cut -c40-330
  grep "reads/s" $name.err | sed 's/.*; \([0-9.]* s (\)/\1/' | cut -c1-90
}
for turn in 1 2 3; do
  run pe_new $NEW map -t 16 chr20.h5 r1.fq r2.fq -o pe.sam
  run pe_old $OLD map -t 16 chr20.h5 r1.fq r2.fq -o peo.sam
  run pe_b18 $NEW map -t 16 --batch-size 262144 chr20.h5 r1.fq r2.fq -o pe18.sam
done
for f in pe peo pe18; do echo "md5 $f $(grep -v '^@PG' $f.sam | md5sum | cut -c1-16)"; done; rm -f pe*.sam
for turn in 1 2; do
  run se_new $NEW map -t 16 chr20.h5 se.fq -o se.sam
  run se_old $OLD map -t 16 chr20.h5 se.fq -o seo.sam
  run se_b19 $NEW map -t 16 --batch-size 524288 chr20.h5 se.fq -o se19.sam
done
for f in se seo se19; do echo "md5 $f $(grep -v '^@PG' $f.sam | md5sum | cut -c1-16)"; done
env PYTHONPATH=/tmp/new:/tmp/site python3 $R/benchmarks/kernel_profile.py chr20.h5 se.fq -t 16 --top 3 --gaps 8 \
  2> kp.err | cut -c1-150
echo "total $(( $(date +%s) - T0 )) s"
