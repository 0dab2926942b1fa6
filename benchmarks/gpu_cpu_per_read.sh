#!/bin/bash
# Where the host CPU of a one-GPU run goes, on the speed sets (GRCh37 chr20, 10 M single-end 100 bp, seed 22,
# and 5 M pairs 2x150, seed 21, from mason; index prebuilt): the host's processor; the postprocessing's CPU per
# read replayed alone in one thread (benchmarks.postprocess_cpu, on the first 400,000 reads and 200,000 pairs);
# then whole runs at -t 16 and fewer threads, each with its stage line (wall and thread CPU of the postprocessing
# steps and of the device thread) and the process's user and system CPU. Every line also goes to $OUT/log.txt
# as it is printed. On the GPU host, in the repository root, with .device and .bench_data carried;
# WDIR=/dev/shm/wc keeps inputs and outputs in memory.
set -u
W=${WDIR:-/tmp/wc}; source "$(dirname "$0")/gpu_common.sh"
M="env MEASURE_GPU=0 MEASURE_HOST_CPU=1 python3 $R/benchmarks/measure.py"
mkdir -p ${OUT:-$W/out}; exec > >(tee ${OUT:-$W/out}/log.txt) 2>&1
lscpu | grep -E '^(Model name|Thread|Core|Socket|CPU\(s\)|CPU max MHz|L3)' | sed 's/  */ /g'
echo "host: $(nproc) cores, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(cd $R && git rev-parse --short HEAD 2>/dev/null)"
# the inputs of an earlier call on the same host are kept (a warm host keeps /dev/shm)
[ -s chr20.h5 ] || peanut_index
[ -s r2.fq ] && [ $(wc -l < r2.fq) -eq $(( 4 * ${PAIRS:-5000000} )) ] || simulate_pairs ${PAIRS:-5000000} 8
[ -s se.fq ] && [ $(wc -l < se.fq) -eq $(( 4 * ${SINGLE:-10000000} )) ] || simulate_single ${SINGLE:-10000000} 8
# the background jobs only: a bare wait would also wait for the tee above
for j in $(jobs -p); do wait $j; done; echo "prep $(( $(date +%s) - T0 )) s"
head -1600000 se.fq > se400k.fq; head -800000 r1.fq > p1.fq; head -800000 r2.fq > p2.fq
head -4000 se.fq > tiny.fq; $NEW map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm.err
# the benchmarks outside the checkout, whose peanut_py has no compiled extensions: they import the installed one
rm -rf /tmp/bench && mkdir -p /tmp/bench && cp -r $R/benchmarks /tmp/bench/
PP="env PYTHONPATH=/tmp/bench:/tmp/new:/tmp/site python3 -m benchmarks.postprocess_cpu"
(cd /tmp/bench && $PP $W/chr20.h5 $W/se400k.fq -t 16 --reps 2) 2>&1 | grep 'us per read' | sed 's/^/alone se: /'
(cd /tmp/bench && $PP $W/chr20.h5 $W/p1.fq $W/p2.fq -t 16 --reps 2) 2>&1 | grep 'us per read' | sed 's/^/alone pe: /'
echo "alone done $(( $(date +%s) - T0 )) s"
run() {  # run NAME THREADS INPUT...
  local name=$1 t=$2; shift 2
  $M $name $NEW map -t $t chr20.h5 "$@" -o $name.sam | cut -c1-120; rm -f $name.sam
  grep -E "reads/s|stage seconds|process CPU" $name.err | sed 's/^.*; \([0-9.]* s (\)/  clock \1/' | cut -c1-400
}
for t in 16 8 4 16 24; do run se_t$t $t se.fq; done
for t in 16 8 16; do run pe_t$t $t r1.fq r2.fq; done
echo "total $(( $(date +%s) - T0 )) s"
