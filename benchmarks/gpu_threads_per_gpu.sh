#!/bin/bash
# Device threads per GPU: `--device 0` against `--device 0,0` and `0,0,0` (two or three contexts on one GPU,
# so that one batch's host-side steps overlap another's kernels), -t 16, on GRCh37 chr20: 5 M single-end
# 100 bp and 2.5 M pairs 2x150 (mason, the seeds of gpu_speed.sh), beside minibwa; the SAM of 200,000 pairs
# compared.  On the GPU host, in the repository root, with .device and .bench_data carried.
set -u
W=/tmp/w7; source "$(dirname "$0")/gpu_common.sh"
( mkdir -p mb && ln -sf $W/chr20.fa mb/chr20.fa && minibwa index -t 4 mb/chr20.fa > mb.log 2>&1; echo minibwa-index $? ) &
$NEW index chr20.fa -o chr20.h5 2>&1 | tail -1 | cut -c1-80
mason_simulator -ir chr20.fa -n 2500000 --illumina-read-length 150 -o r1.fq -or r2.fq --seed 21 --num-threads 8 -q > /dev/null 2>&1 &
mason_simulator -ir chr20.fa -n 5000000 --illumina-read-length 100 -o se.fq --seed 22 --num-threads 8 -q > /dev/null 2>&1 &
wait; echo "prep $(( $(date +%s) - T0 )) s"
head -800000 r1.fq > s1.fq; head -800000 r2.fq > s2.fq
tm warm $NEW map -t 16 --device 0,0,0 chr20.h5 s1.fq s2.fq
for d in 0 0,0 0,0,0; do echo "ident $d $($NEW map -q -t 16 --device $d chr20.h5 s1.fq s2.fq | grep -v '^@PG' | md5sum | cut -c1-16)"; done
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  for d in 0 0,0 0,0,0; do
    tm ${set}_dev$d $NEW map -t 16 --device $d chr20.h5 $IN; grep "reads/s\|stage" ${set}_dev$d.err | grep -v "reads done" | cut -c1-300
  done
  tm ${set}_minibwa minibwa map -t 16 mb/chr20.fa $IN
  tm ${set}_dev0,0_again $NEW map -t 16 --device 0,0 chr20.h5 $IN
  tm ${set}_dev0_again $NEW map -t 16 --device 0 chr20.h5 $IN
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
done
echo "total $(( $(date +%s) - T0 )) s"
