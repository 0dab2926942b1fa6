#!/bin/bash
# Speed only, larger sets: peanut-py against minibwa, strobealign and minimap2 2.30 on GRCh37 chr20, -t 16:
# 5 M single-end 100 bp and 2.5 M pairs 2x150 (mason).  On the GPU host, in the repository root, with .device
# and .bench_data carried (docs/gpu.md, "Running on a GPU host"); SRC=DIR installs peanut-py from DIR instead.
set -u
W=/tmp/w4; source "$(dirname "$0")/gpu_common.sh"
minibwa_index
( minimap2-2.30 -x sr -d chr20.mmi chr20.fa > mm.log 2>&1; echo mm2-index $? ) &
$NEW index chr20.fa -o chr20.h5 2>&1 | tail -1 | cut -c1-120
simulate_speed_sets
wait; echo "prep $(( $(date +%s) - T0 )) s"; ls -la *.fq | awk '{print $5, $9}'
head -4000 se.fq > tiny.fq
tm warm $NEW map -t 16 chr20.h5 tiny.fq; tm tiny1000 $NEW map -t 16 chr20.h5 tiny.fq; grep "device:" tiny1000.err | cut -c1-200
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  tm ${set}_peanut $NEW map -t 16 chr20.h5 $IN; grep "reads/s\|stage" ${set}_peanut.err | cut -c1-250
  tm ${set}_minibwa minibwa map -t 16 mb/chr20.fa $IN
  tm ${set}_strobealign strobealign -t 16 chr20.fa $IN; grep -i "total time mapping\|total time indexing" ${set}_strobealign.err | tr '\n' ' '; echo
  tm ${set}_mm230 minimap2-2.30 -ax sr -t 16 chr20.mmi $IN
  tm ${set}_peanut2 $NEW map -t 16 chr20.h5 $IN; grep "reads/s" ${set}_peanut2.err | cut -c1-250
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
done
echo "total $(( $(date +%s) - T0 )) s"
