#!/bin/bash
# Several GPUs on one host (issue 25, docs/gpu.md "Several GPUs"): whether the mapping processes gain from
# running on the cores next to their GPUs (benchmarks/pin_processes.py pins them from outside, so that the
# same installation runs both ways, in turns), and where the writing process spends its time (py-spy of that
# process alone, 20 M pairs). 5 M pairs 2x150 of chr20 (mason, seed 21) and the same pairs four times over;
# inputs and outputs in /dev/shm; strobealign with every core in the same run.
# On the multi-GPU host, in the repository root, with .device and .bench_data carried.
set -u
W=${WDIR:-/dev/shm/wp}; source "$(dirname "$0")/gpu_common.sh"
T=$(nproc)
M="env MEASURE_GPU=0 MEASURE_STAMPS=1 MEASURE_HOST_CPU=1 python3 $R/benchmarks/measure.py"
python3 -m pip install -q --no-index --no-deps --target /tmp/spy $R/.device/extra/py_spy-*.whl > /dev/null 2>&1
NG=$(python3 -c 'import pyopencl as cl; print(sum(len(p.get_devices(cl.device_type.GPU)) for p in cl.get_platforms()))')
ALLG=$(python3 -c "print(','.join(map(str, range($NG))))")
echo "host: $T cores, $NG GPUs ($(nvidia-smi --query-gpu=name,persistence_mode --format=csv,noheader | head -1)); $(git -C $R log -1 --format=%h 2>/dev/null)"
nvidia-smi topo -m 2>/dev/null | head -$(( NG + 3 ))
lscpu | grep -E "^(Socket|Core|Thread|NUMA node)" | tr -s ' '
peanut_index
simulate_pairs 5000000 24
wait; echo "chr20 prepared after $(( $(date +%s) - T0 )) s"
head -400000 r1.fq > s1.fq; head -400000 r2.fq > s2.fq
$NEW map -t $T --device $ALLG chr20.h5 s1.fq s2.fq > /dev/null 2> warm.err; echo "warm-up rc $?"
cat r1.fq r1.fq r1.fq r1.fq > q1.fq & cat r2.fq r2.fq r2.fq r2.fq > q2.fq & wait
# run NAME SET [pin] CMD...: measured (pinned from outside with "pin"), summary lines, SAM body md5
run() {
  local name=$1 set=$2; shift 2
  local pin=0; [ "$1" = pin ] && { pin=1; shift; }
  $M $name "$@" -o $W/$set.sam > $name.line &
  local mpid=$!
  [ $pin = 1 ] && python3 $R/benchmarks/pin_processes.py --under $mpid --gpus $NG --seconds 200 > $name.pin &
  wait $mpid; wait
  cut -c1-170 $name.line; [ $pin = 1 ] && head -1 $name.pin | cut -c1-300
  grep -h "mapping processes:\|reads/s\|stage seconds\|\] exit" $name.err | grep -v "reads done" | cut -c1-240
  echo "md5 $set $name $(grep -v '^@PG' $W/$set.sam | md5sum | cut -c1-16)"; rm -f $W/$set.sam
}
for rep in 1 2; do
  run pe_allg_$rep pe $NEW map -t $T --device $ALLG chr20.h5 r1.fq r2.fq
  run pe_allg_pin_$rep pe pin $NEW map -t $T --device $ALLG chr20.h5 r1.fq r2.fq
done
run q_allg q $NEW map -t $T --device $ALLG chr20.h5 q1.fq q2.fq
run q_allg_pin q pin $NEW map -t $T --device $ALLG chr20.h5 q1.fq q2.fq
# the writing process alone under py-spy (its threads, idle time included)
env PYTHONPATH=/tmp/new:/tmp/site /tmp/spy/bin/py-spy record --threads --idle -r 100 -f raw -o parent.txt -- \
  python3 -m peanut_py map -t $T --device $ALLG chr20.h5 q1.fq q2.fq -o $W/q.sam > /dev/null 2> spy.err
grep -h "reads/s" spy.err | cut -c1-200; rm -f $W/q.sam
echo "== writing process, samples per thread"; python3 $R/benchmarks/spy_threads.py parent.txt --top 12
for th in MainThread peanut-cut; do echo "== $th"; python3 $R/benchmarks/spy_threads.py parent.txt --thread $th --top 12; done
cp parent.txt ${OUT:-.}/ 2>/dev/null
echo "$($M pe_strobealign strobealign -t $T chr20.fa r1.fq r2.fq | cut -c1-170)"; grep -i 'total time mapping' pe_strobealign.err
echo "total $(( $(date +%s) - T0 )) s"
