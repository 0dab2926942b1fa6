#!/bin/bash
# The speed sets of the "five times the fastest CPU mapper" target on a one-GPU host with 16 cores: GRCh37 chr20,
# 10 M single-end 100 bp (seed 22) and 5 M pairs 2x150 (seed 21) from mason, index prebuilt, -t 16 for every
# tool; peanut-py in one and in two mapping processes, minibwa, strobealign (its own mapping time) and, while
# time is left, minimap2 2.30. On the GPU host, in the repository root, with .device and .bench_data carried;
# WDIR=/dev/shm/w20 keeps inputs and outputs in memory.
set -u
W=${WDIR:-/tmp/w20}; source "$(dirname "$0")/gpu_common.sh"
M="env MEASURE_GPU=0 python3 $R/benchmarks/measure.py"
minibwa_index 4
( minimap2-2.30 -x sr -d chr20.mmi chr20.fa > mm.log 2>&1; echo mm2-index $? ) &
peanut_index
simulate_pairs 5000000 8
simulate_single 10000000 8
wait; echo "prep $(( $(date +%s) - T0 )) s"
head -4000 se.fq > tiny.fq; $NEW map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm.err
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  $M ${set}_peanut $NEW map -t 16 chr20.h5 $IN -o $set.sam | cut -c1-120
  grep "reads/s" ${set}_peanut.err | cut -c1-250
  echo "md5 $(grep -v '^@PG' $set.sam | md5sum | cut -c1-16)"; rm -f $set.sam
  $M ${set}_peanut_p2 $NEW map -t 16 --processes 2 chr20.h5 $IN -o $set.sam | cut -c1-120
  echo "md5 $(grep -v '^@PG' $set.sam | md5sum | cut -c1-16)"; rm -f $set.sam
  $M ${set}_minibwa minibwa map -t 16 mb/chr20.fa $IN | cut -c1-120; rm -f ${set}_minibwa.out
  $M ${set}_strobealign strobealign -t 16 chr20.fa $IN | cut -c1-120; rm -f ${set}_strobealign.out
  grep -i "total time mapping" ${set}_strobealign.err
done
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  [ $(( $(date +%s) - T0 )) -lt 330 ] && { $M ${set}_minimap2 minimap2-2.30 -ax sr -t 16 chr20.mmi $IN | cut -c1-120; rm -f ${set}_minimap2.out; }
done
echo "total $(( $(date +%s) - T0 )) s"
