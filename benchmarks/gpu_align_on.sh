#!/bin/bash
# peanut map --align-on cpu|device at -t 16, 8, 4 on 2.5 M pairs 2x150 and 5 M single-end 100 bp (GRCh37 chr20),
# and the SAM identity of the two on a subset. On the GPU host, in the repository root, with .device and
# .bench_data carried (docs/gpu.md, "Running on a GPU host"); SRC=DIR installs peanut-py from DIR instead.
set -u
W=/tmp/w5; source "$(dirname "$0")/gpu_common.sh"
$NEW index chr20.fa -o chr20.h5 2>&1 | tail -1 | cut -c1-60
simulate_speed_sets
wait; echo "prep $(( $(date +%s) - T0 )) s"
head -800000 r1.fq > s1.fq; head -800000 r2.fq > s2.fq; head -1600000 se.fq > sse.fq
$NEW map -t 16 chr20.h5 s1.fq s2.fq > /dev/null 2>&1   # compile
for w in cpu device; do
  echo "ident pe $w $($NEW map -q -t 16 --align-on $w chr20.h5 s1.fq s2.fq | grep -v '^@PG' | md5sum | cut -c1-16)"
  echo "ident se $w $($NEW map -q -t 16 --align-on $w --batch-size 50000 chr20.h5 sse.fq | grep -v '^@PG' | md5sum | cut -c1-16)"
done
for t in 16 8 4; do for w in cpu device; do
  [ $(( $(date +%s) - T0 )) -gt 520 ] && break 2
  $NEW map -t $t --align-on $w chr20.h5 r1.fq r2.fq 2>&1 >/dev/null | grep "reads/s\|stage" | grep -v "reads done" | sed "s/^/pe t=$t $w: /" | cut -c1-230
  $NEW map -t $t --align-on $w chr20.h5 se.fq 2>&1 >/dev/null | grep "reads/s\|stage" | grep -v "reads done" | sed "s/^/se t=$t $w: /" | cut -c1-230
done; done
echo "total $(( $(date +%s) - T0 )) s"
