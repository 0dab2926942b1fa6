#!/bin/bash
# Variants of the filtration's kernels on issue 20's sets (10 M single-end 100 bp, 5 M pairs 2x150, chr20, -t 16),
# compared in one installation through kernel_profile.py's --set (device time per kernel, the run's device
# stage, the SAM's md5), then this version against the peers in the same run (minibwa, strobealign's own
# mapping time, minimap2 2.30). VARIANTS: lines of --set arguments, the first the baseline (all of them for
# single-end reads, the first PE_VARIANTS for pairs: default 2); PEERS=0 leaves the peers out.
# On the one-GPU host, in the repository root, with .device and .bench_data carried; WDIR=/dev/shm/wk keeps
# inputs and outputs in memory.
set -u
W=${WDIR:-/tmp/wk}; source "$(dirname "$0")/gpu_common.sh"
M="env MEASURE_GPU=0 python3 $R/benchmarks/measure.py"
KP="env PYTHONPATH=/tmp/new:/tmp/site python3 $R/benchmarks/kernel_profile.py"
if [ "${PEERS:-1}" = 1 ]; then
  minibwa_index 4
  ( minimap2-2.30 -x sr -d chr20.mmi chr20.fa > mm.log 2>&1; echo mm2-index $? ) &
fi
peanut_index
simulate_pairs ${PAIRS:-5000000} 8
simulate_single ${SINGLE:-10000000} 8
wait; echo "prep $(( $(date +%s) - T0 )) s"
head -4000 se.fq > tiny.fq; $NEW map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm.err
# the baseline (an empty line: the constants as they are) and the variants, one line each
VARIANTS=${VARIANTS:-"
--set filtration.EMIT_BLOCK=64
--set filtration.EMIT_BLOCK=128
--set filtration.SORT_GROUP=256"}
show() {  # the profile's summary lines and the filtration kernels' rows
  grep -E "^set |^wall|^(emit_hits|sort_slots|write_candidates|count_hits|present_kmers|fill_occ|count_occ|copy to device)" $1 \
    | cut -c1-150
}
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  i=0
  while IFS= read -r v; do
    [ $(( $(date +%s) - T0 )) -gt ${KP_UNTIL:-200} ] && break
    [ $set = pe ] && [ $i -ge ${PE_VARIANTS:-2} ] && break  # pairs: the baseline and the first variant
    echo "== $set variant $i: ${v:-defaults}"
    # a variant's new defines compile first, outside the measured run (its first batch would wait for them)
    $KP chr20.h5 tiny.fq -t 16 $v > /dev/null 2>&1 < /dev/null
    $KP chr20.h5 $IN -t 16 --top 40 $v -o v$i.sam > ${set}_v$i.txt 2> ${set}_v$i.err < /dev/null
    show ${set}_v$i.txt; grep "stage seconds" ${set}_v$i.err | cut -c1-200
    echo "md5 $(grep -v '^@PG' v$i.sam | md5sum | cut -c1-16)"; rm -f v$i.sam
    i=$((i + 1))
  done <<< "$VARIANTS"
done
[ "${PEERS:-1}" = 0 ] && { echo "total $(( $(date +%s) - T0 )) s"; exit 0; }
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  $M ${set}_peanut $NEW map -t 16 chr20.h5 $IN -o $set.sam | cut -c1-120
  grep "reads/s" ${set}_peanut.err | cut -c1-250; rm -f $set.sam
  $M ${set}_minibwa minibwa map -t 16 mb/chr20.fa $IN | cut -c1-120; rm -f ${set}_minibwa.out
  $M ${set}_strobealign strobealign -t 16 chr20.fa $IN | cut -c1-120; rm -f ${set}_strobealign.out
  grep -i "total time mapping" ${set}_strobealign.err
  $M ${set}_peanut2 $NEW map -t 16 chr20.h5 $IN -o $set.sam | cut -c1-120
  grep "reads/s" ${set}_peanut2.err | cut -c1-250; rm -f $set.sam
done
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  [ $(( $(date +%s) - T0 )) -lt ${MM2_UNTIL:-380} ] && { $M ${set}_minimap2 minimap2-2.30 -ax sr -t 16 chr20.mmi $IN | cut -c1-120; rm -f ${set}_minimap2.out; }
done
echo "total $(( $(date +%s) - T0 )) s"
