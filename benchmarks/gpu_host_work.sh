#!/bin/bash
# The device thread's host work and the process's memory allocator, on issue 20's sets (10 M single-end 100 bp,
# 5 M pairs 2x150, chr20, -t 16, one GPU): this checkout ("new") and an earlier version (OLD_SRC, "old") in
# turns, "new" with glibc's own malloc settings ("glibc": a GLIBC_TUNABLES that changes nothing makes
# allocator.py leave them) and "new" writing SAM to /dev/null (what the output's writing costs); minibwa and
# strobealign once per set. Every line also goes to OUT/log.txt as it is printed, and each run's stderr is
# kept (NAME_TURN.err), so a call cut short by its time limit still returns what ran.
# On the GPU host, in the repository root, with .device, .bench_data and OLD_SRC carried;
# WDIR=/dev/shm/whw keeps inputs and outputs in memory.
set -u
W=${WDIR:-/tmp/whw}; source "$(dirname "$0")/gpu_common.sh"
M="env MEASURE_GPU=0 python3 $R/benchmarks/measure.py"
mkdir -p ${OUT:-$W/out}; exec > >(tee ${OUT:-$W/out}/log.txt) 2>&1
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/old "$R/$OLD_SRC" > i0.log 2>&1 &
minibwa_index 4
peanut_index
simulate_pairs ${PAIRS:-5000000} 8
simulate_single ${SINGLE:-10000000} 8
wait; echo "prep $(( $(date +%s) - T0 )) s"
OLD="env PYTHONPATH=/tmp/old:/tmp/site python3 -m peanut_py"
GLIBC="env GLIBC_TUNABLES=glibc.malloc.perturb=0 PYTHONPATH=/tmp/new:/tmp/site python3 -m peanut_py"
head -4000 se.fq > tiny.fq; $NEW map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm.err
$OLD map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm_old.err
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  for turn in 1 2; do
    for v in new old glibc; do
      case $v in new) P=$NEW;; old) P=$OLD;; glibc) P=$GLIBC;; esac
      $M ${set}_${v}_$turn $P map -t 16 chr20.h5 $IN -o $set.$v.sam | cut -c1-100
      grep "reads/s" ${set}_${v}_$turn.err | sed 's/.*; \([0-9.]* s (\)/  clock \1/' | cut -c1-90
      grep "stage seconds" ${set}_${v}_$turn.err | cut -c1-200
    done
  done
  for v in new old glibc; do echo "md5 $v $(grep -v '^@PG' $set.$v.sam | md5sum | cut -c1-16)"; done
  rm -f $set.*.sam
  $M ${set}_devnull $NEW map -t 16 chr20.h5 $IN -o /dev/null | cut -c1-100
  grep "reads/s" ${set}_devnull.err | sed 's/.*; \([0-9.]* s (\)/  clock \1/' | cut -c1-90; rm -f ${set}_devnull.out
  $M ${set}_minibwa minibwa map -t 16 mb/chr20.fa $IN | cut -c1-100; rm -f ${set}_minibwa.out
  $M ${set}_strobealign strobealign -t 16 chr20.fa $IN | cut -c1-100; rm -f ${set}_strobealign.out
  grep -i "total time mapping" ${set}_strobealign.err
done
echo "total $(( $(date +%s) - T0 )) s"
