#!/bin/bash
# Where one GPU's run spends its time, on issue 20's sets (10 M single-end 100 bp, 5 M pairs 2x150, chr20,
# -t 16): plain runs, the kernels' device time and the device's busy share (benchmarks/kernel_profile.py),
# and with SPY_RUNS=1 py-spy samples of every thread (on CPU, and with idle samples) as collapsed stacks in OUT.
# KP_ARGS adds arguments to kernel_profile.py (--gaps 40: where the device sat idle).
# OLD_SRC=DIR installs an earlier version too and runs it and this one in turns, twice per set.
# On the GPU host, in the repository root, with .device (py-spy's wheel in .device/extra), .bench_data and
# OLD_SRC carried; WDIR=/dev/shm/wprof keeps inputs and outputs in memory.
set -u
W=${WDIR:-/tmp/wprof}; source "$(dirname "$0")/gpu_common.sh"
M="env MEASURE_GPU=0 python3 $R/benchmarks/measure.py"
OLD=
if [ -n "${OLD_SRC:-}" ]; then
  python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/old "$R/$OLD_SRC" > i0.log 2>&1 &
fi
python3 -m pip install -q --no-deps --target /tmp/spy $R/.device/extra/py_spy*.whl > /dev/null 2>&1
SPY=/tmp/spy/bin/py-spy
peanut_index
simulate_pairs ${PAIRS:-5000000} 8
simulate_single ${SINGLE:-10000000} 8
wait; echo "prep $(( $(date +%s) - T0 )) s"
[ -n "${OLD_SRC:-}" ] && OLD="env PYTHONPATH=/tmp/old:/tmp/site python3 -m peanut_py"
head -4000 se.fq > tiny.fq; $NEW map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm.err
[ -n "$OLD" ] && $OLD map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm_old.err
mkdir -p ${OUT:-out}
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  for turn in 1 2; do
    for v in new old; do
      if [ $v = new ]; then P=$NEW; else P=$OLD; fi
      [ -z "$P" ] && continue
      $M ${set}_$v $P map -t 16 chr20.h5 $IN -o $set.$v.sam | cut -c1-120
      grep "stage seconds" ${set}_$v.err | cut -c1-250
    done
  done
  # EXTRA_T="4 8": this version again with fewer threads (the device thread's steps with fewer threads beside it)
  for t in ${EXTRA_T:-}; do
    $M ${set}_t$t $NEW map -t $t chr20.h5 $IN -o /dev/null | cut -c1-120; grep "stage seconds" ${set}_t$t.err | cut -c1-250
  done
  for v in new old; do [ -f $set.$v.sam ] && echo "md5 $v $(grep -v '^@PG' $set.$v.sam | md5sum | cut -c1-16)"; done
  rm -f $set.*.sam
  env PYTHONPATH=/tmp/new:/tmp/site python3 $R/benchmarks/kernel_profile.py chr20.h5 $IN -t 16 --top 40 ${KP_ARGS:-} \
    > ${set}_kernels.txt 2> ${set}_kernels.err; head -6 ${set}_kernels.txt; grep -A 42 "device idle" ${set}_kernels.txt; cp ${set}_kernels.txt ${OUT:-out}/
  if [ -n "${SPY_RUNS:-}" ]; then
    for idle in "" "--idle"; do
      env PYTHONPATH=/tmp/new:/tmp/site $SPY record -r 250 --threads $idle -f raw -o ${set}_spy${idle}.txt \
        -- python3 -m peanut_py map -t 16 chr20.h5 $IN -o $set.sam > /dev/null 2> ${set}_spy.err
      rm -f $set.sam; cp ${set}_spy${idle}.txt ${OUT:-out}/
    done
  fi
done
echo "total $(( $(date +%s) - T0 )) s"
