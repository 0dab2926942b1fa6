#!/bin/bash
# Mapping processes on a host with several GPUs (docs/gpu.md, "Mapping processes"): 5 M pairs 2x150 and 5 M
# single-end 100 bp of GRCh37 chr20 (mason), 10 M pairs (the 5 M twice); peanut map on one GPU (a 16-core slice,
# and every core), 2 GPUs and every GPU; minibwa and strobealign with every core; SAM bodies compared by md5.
# On the host, in the repository root, with .device and .bench_data carried; SRC=DIR installs from DIR;
# OLD_SRC=DIR also installs an earlier version from DIR and runs it beside the new one on 2 GPUs, twice, in
# turns; WDIR=/dev/shm/wp keeps inputs and outputs in memory (no disk write-back between runs).
set -u
OLD=
if [ -n "${OLD_SRC:-}" ]; then
  python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/old "$OLD_SRC" > /tmp/i0.log 2>&1 &
fi
W=${WDIR:-/tmp/wp}; source "$(dirname "$0")/gpu_common.sh"
[ -n "${OLD_SRC:-}" ] && wait && OLD="env PYTHONPATH=/tmp/old:/tmp/site python3 -m peanut_py"
T=$(nproc)
M="env MEASURE_GPU=0 MEASURE_STAMPS=1 python3 $R/benchmarks/measure.py"
NG=$(python3 -c 'import pyopencl as cl; print(sum(len(p.get_devices(cl.device_type.GPU)) for p in cl.get_platforms()))')
echo "host: $T cores, $NG GPUs"
minibwa_index 8
peanut_index
simulate_pairs 5000000 32
simulate_single 5000000 24
wait; echo "prep $(( $(date +%s) - T0 )) s"
cat r1.fq r1.fq > d1.fq; cat r2.fq r2.fq > d2.fq
head -400000 r1.fq > s1.fq; head -400000 r2.fq > s2.fq
$NEW map -t $T --device all chr20.h5 s1.fq s2.fq > /dev/null 2> warm.err; echo "warm-up rc $?"  # kernels cached
ALLG=$(python3 -c "print(','.join(map(str, range($NG))))")
run() {  # run NAME OUT CMD...: measured, stderr's summary lines shown, SAM body md5 kept
  local name=$1 out=$2; shift 2
  $M $name "$@" -o $out.sam | cut -c1-150
  grep -h "mapping processes\|reads/s" $name.err | grep -v "reads done" | cut -c1-240
  echo "md5 $name $(grep -v '^@PG' $out.sam | md5sum | cut -c1-16)"; rm -f $out.sam
}
run pe_1g_c16 pe taskset -c 0-15 $NEW map -t 16 --device 0 chr20.h5 r1.fq r2.fq
run pe_1g_t$T pe $NEW map -t $T --device 0 chr20.h5 r1.fq r2.fq
run pe_1g_p2 pe $NEW map -t $T --device 0 --processes 2 chr20.h5 r1.fq r2.fq
for rep in 1 2; do
  run pe_2g pe $NEW map -t $T --device 0,1 chr20.h5 r1.fq r2.fq
  [ -n "$OLD" ] && run pe_2g_old pe $OLD map -t $T --device 0,1 chr20.h5 r1.fq r2.fq
done
run pe_allg_all pe $NEW map -t $T --device all chr20.h5 r1.fq r2.fq
[ $NG -gt 2 ] && run pe_allg_list pe $NEW map -t $T --device $ALLG chr20.h5 r1.fq r2.fq
run d_1g_p2 d $NEW map -t $T --device 0 --processes 2 chr20.h5 d1.fq d2.fq
for rep in 1 2; do
  run d_2g d $NEW map -t $T --device 0,1 chr20.h5 d1.fq d2.fq
  [ -n "$OLD" ] && run d_2g_old d $OLD map -t $T --device 0,1 chr20.h5 d1.fq d2.fq
done
[ $NG -gt 2 ] && run d_allg d $NEW map -t $T --device $ALLG chr20.h5 d1.fq d2.fq
run se_1g_c16 se taskset -c 0-15 $NEW map -t 16 --device 0 chr20.h5 se.fq
run se_2g se $NEW map -t $T --device 0,1 chr20.h5 se.fq
[ -n "$OLD" ] && run se_2g_old se $OLD map -t $T --device 0,1 chr20.h5 se.fq
[ $NG -gt 2 ] && run se_allg se $NEW map -t $T --device $ALLG chr20.h5 se.fq
echo "t $(( $(date +%s) - T0 )) s"
[ $(( $(date +%s) - T0 )) -lt 300 ] && $M pe_strobealign strobealign -t $T chr20.fa r1.fq r2.fq && grep -i "total time mapping" pe_strobealign.err
[ $(( $(date +%s) - T0 )) -lt 330 ] && $M pe_minibwa minibwa map -t $T mb/chr20.fa r1.fq r2.fq
[ $(( $(date +%s) - T0 )) -lt 350 ] && $M se_minibwa minibwa map -t $T mb/chr20.fa se.fq
rm -f *.out
echo "total $(( $(date +%s) - T0 )) s"
