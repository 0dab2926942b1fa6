#!/bin/bash
# The index's mask threshold against speed and accuracy on a one-GPU host: GRCh37 chr20 indexed with -m 300
# (the default) and with each of MASKS (default "100 50"), the speed sets (10 M single-end 100 bp, seed 22; 5 M
# pairs 2x150, seed 21; mason, 8 threads, with the true alignments), -t 16, indexes prebuilt, the indexes in
# turns, two runs each; every index's first SAM scored on the first 2 M reads of its set
# (benchmarks/measure.py --score-first), then strobealign (its own mapping time) on each set.
#   WDIR=/dev/shm/wm bash benchmarks/gpu_mask.sh
# On the GPU host, in the repository root, with .device and .bench_data carried.
set -u
W=${WDIR:-/tmp/wm}; source "$(dirname "$0")/gpu_common.sh"
MASKS="300 ${MASKS:-100 50}"
M="env MEASURE_GPU=0 python3 $R/benchmarks/measure.py"
for m in $MASKS; do ( $NEW index -m $m chr20.fa -o m$m.h5 > ix$m.log 2>&1; echo "index -m $m: $?" ) & done
simulate_pairs 5000000 8 truth_pe.sam
simulate_single 10000000 8 truth_se.sam
for j in $(jobs -p); do wait $j; done; echo "prep $(( $(date +%s) - T0 )) s"
for m in $MASKS; do grep -h "masked\|mask" ix$m.log | head -2 | cut -c1-200; done
truth_part 2000000 se pe
head -4000 se.fq > tiny.fq; for m in $MASKS; do $NEW map -t 16 m$m.h5 tiny.fq > /dev/null 2> warm.err; done
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  for rep in 1 2; do
    for m in $MASKS; do
      $M ${set}_m${m}_$rep $NEW map -t 16 m$m.h5 $IN | cut -c1-120
      grep -h "reads/s\|stage seconds\|raw hits\|candidates" ${set}_m${m}_$rep.err | grep -v "reads done" | cut -c1-300
      [ $rep = 2 ] && rm -f ${set}_m${m}_$rep.out
    done
  done
  for m in $MASKS; do
    python3 $R/benchmarks/measure.py --score-first ptruth_$set.sam ${set}_m${m}_1.out > $set.m$m.score 2>&1 &
  done
  for j in $(jobs -p); do wait $j; done
  for m in $MASKS; do echo "score ${set}_m$m $(cat $set.m$m.score)"; rm -f ${set}_m${m}_1.out; done
  $M ${set}_strobealign strobealign -t 16 chr20.fa $IN | cut -c1-120; rm -f ${set}_strobealign.out
  grep -hi "total time mapping" ${set}_strobealign.err
done
echo "total $(( $(date +%s) - T0 )) s"
