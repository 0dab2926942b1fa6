#!/bin/bash
# Several GPUs of one host: peanut map with 1, 2 and all GPUs (-t = every core) on 2.5 M pairs 2x150 of
# GRCh37 chr20 (mason), the fastest CPU peers (minibwa, strobealign's own mapping time) with every core, and
# the SAM of one GPU against all GPUs on 200 k pairs. On a multi-GPU host, in the repository root, with
# .device and .bench_data carried (docs/gpu.md, "Running on a GPU host"); SRC=DIR installs from DIR instead;
# WORKERS="threads processes" runs each device choice with each --workers.
set -u
W=/tmp/w6; source "$(dirname "$0")/gpu_common.sh"
T=$(nproc)
NG=$(python3 -c 'import pyopencl as cl; print(sum(len(p.get_devices(cl.device_type.GPU)) for p in cl.get_platforms()))')
echo "host: $T cores, $NG GPUs"
minibwa_index 8
peanut_index
simulate_pairs 2500000 16
wait; echo "prep $(( $(date +%s) - T0 )) s"
head -800000 r1.fq > s1.fq; head -800000 r2.fq > s2.fq
tm warm $NEW map -t $T --device all chr20.h5 s1.fq s2.fq   # compiles for every GPU
ALL=all; TWO=0,1
for d in 0 $ALL $TWO; do
  for w in ${WORKERS:-auto}; do
    [ $(( $(date +%s) - T0 )) -gt 300 ] && break
    tm pe_gpu_${d}_$w $NEW map -t $T --device $d --workers $w chr20.h5 r1.fq r2.fq
    grep "processes\|threads\|reads/s\|stage" pe_gpu_${d}_$w.err | grep -v "reads done" | cut -c1-300
  done
done
[ $(( $(date +%s) - T0 )) -lt 330 ] && tm pe_minibwa minibwa map -t $T mb/chr20.fa r1.fq r2.fq
[ $(( $(date +%s) - T0 )) -lt 350 ] && { tm pe_strobealign strobealign -t $T chr20.fa r1.fq r2.fq; grep -i "total time mapping" pe_strobealign.err; }
for d in 0 $ALL; do
  for w in ${WORKERS:-auto}; do
    [ $(( $(date +%s) - T0 )) -gt 380 ] && break
    echo "ident $d $w $($NEW map -q -t $T --device $d --workers $w chr20.h5 s1.fq s2.fq | grep -v '^@PG' | md5sum | cut -c1-16)"
  done
done
echo "total $(( $(date +%s) - T0 )) s"
