#!/bin/bash
# SAM against BAM output (to a file on the host's disk), -t 16, GRCh37 chr20: 5 M single-end 100 bp and
# 2.5 M pairs 2x150 (mason, the seeds of gpu_speed.sh), beside minibwa; the BAM checked for its magic and
# size (the device host has no samtools; tests/test_bam.py checks the records); the second run's start-up on
# 1,000 reads.  On the GPU host, in the repository root, with .device and .bench_data carried.
set -u
W=/tmp/w8; source "$(dirname "$0")/gpu_common.sh"
minibwa_index
$NEW index chr20.fa -o chr20.h5 2>&1 | tail -1 | cut -c1-80
simulate_speed_sets
wait; echo "prep $(( $(date +%s) - T0 )) s"
head -4000 se.fq > tiny.fq; tm warm $NEW map -t 16 chr20.h5 tiny.fq
for i in 1 2 3; do tm tiny1000_$i $NEW map -t 16 chr20.h5 tiny.fq; done
grep "OpenCL kernels\|compiling" tiny1000_3.err | head -2
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  tm ${set}_sam $NEW map -t 16 chr20.h5 $IN -o $set.sam; grep "reads/s\|stage" ${set}_sam.err | grep -v "reads done" | cut -c1-300
  tm ${set}_bam $NEW map -t 16 chr20.h5 $IN -o $set.bam; grep "reads/s\|stage" ${set}_bam.err | grep -v "reads done" | cut -c1-300
  ls -la $set.sam $set.bam | awk '{print $5, $9}'
  python3 -c "import gzip,sys; d=gzip.open('$set.bam').read(); print('bam uncompressed', len(d), 'bytes, magic', d[:4])"
  rm -f $set.sam $set.bam
  tm ${set}_minibwa minibwa map -t 16 mb/chr20.fa $IN
  tm ${set}_sam2 $NEW map -t 16 chr20.h5 $IN -o $set.sam; rm -f $set.sam
  tm ${set}_bam2 $NEW map -t 16 chr20.h5 $IN -o $set.bam; rm -f $set.bam
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
done
echo "total $(( $(date +%s) - T0 )) s"
