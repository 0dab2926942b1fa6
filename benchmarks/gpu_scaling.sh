#!/bin/bash
# Several GPUs against one on the same host (issue 25, docs/gpu.md "Several GPUs"): 5 M pairs 2x150 of GRCh37
# chr20 (mason, seed 21) and the same pairs four times over (20 M pairs), on chr20's index and on the 3.1 Gbp
# genome of benchmarks/human_scale.py (chr20 plus random chromosomes; the reads come from chr20, contig "20");
# peanut map with 1, 2 and every GPU and every core, and with one GPU on a 16-core slice; minibwa and
# strobealign with every core. Every line goes to $OUT/scaling.txt as it is printed (a call may end at its
# limit); SAM bodies are compared by md5 within a set.
# On the host, in the repository root, with .device and .bench_data carried:
#   bash benchmarks/gpu_scaling.sh                 # everything (more than one 10-minute call: choose PARTS)
#   PARTS="chr20" bash benchmarks/gpu_scaling.sh   # chr20 only (PARTS: any of open chr20 all align writes se big
#                                                  # human humanprep peers halign; align: --align-on cpu and device,
#                                                  # then kernel profiles of both (PROFILE_ALIGN_ON=device: one),
#                                                  # and with big, --align-on device on 20 M pairs; halign: with
#                                                  # human, --align-on device on the 3.1 Gbp genome)
#   OLD_SRC=DIR bash benchmarks/gpu_scaling.sh     # also an earlier version (its source in DIR), beside this one
set -u
OLD=
if [ -n "${OLD_SRC:-}" ]; then  # an earlier version, run beside this one (OLD_SRC=DIR of its source)
  python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/old "$OLD_SRC" > /tmp/i0.log 2>&1 &
fi
# inputs and outputs in memory where /dev/shm has room for them (no disk write-back between runs)
W=${WDIR:-/dev/shm/ws}
[ -z "${WDIR:-}" ] && [ "$(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1)" -lt 80 ] 2>/dev/null && W=/tmp/ws
source "$(dirname "$0")/gpu_common.sh"
[ -n "${OLD_SRC:-}" ] && wait && OLD="env PYTHONPATH=/tmp/old:/tmp/site python3 -m peanut_py"
PARTS=${PARTS:-"chr20 writes se big human peers"}
LOG=${OUT:-$W}/scaling.txt; : > $LOG
say() { echo "$*" | tee -a $LOG; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
T=$(nproc)
M="env MEASURE_GPU=0 MEASURE_STAMPS=1 MEASURE_HOST_CPU=1 python3 $R/benchmarks/measure.py"
NG=$(python3 -c 'import pyopencl as cl; print(sum(len(p.get_devices(cl.device_type.GPU)) for p in cl.get_platforms()))')
ALLG=$(python3 -c "print(','.join(map(str, range($NG))))")
say "work folder $W: $(df -h --output=size,avail $W | tail -1)"
say "host: $T cores, $NG GPUs ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); $(git -C $R log -1 --format=%h 2>/dev/null)"
HS=$W/hs; mkdir -p $HS
# the 3.1 Gbp genome and its index, detached: the runs wait for it (no run beside a build); PARTS=humanprep
# starts it after the other parts, for a next call on the same machine (PARTS=human) to collect
start_human_prep() {
  [ -e $HS/prepare.json ] || pgrep -f "human_scale.py prepare" > /dev/null && return
  # every descriptor beyond the standard three closed, so that no pipe of the caller waits for the build
  ( for fd in $(ls /proc/$BASHPID/fd); do [ $fd -gt 2 ] && eval "exec $fd>&-"; done 2> /dev/null
    cd $HS && setsid nohup env PYTHONPATH=/tmp/new:/tmp/site python3 $R/benchmarks/human_scale.py prepare --work $HS \
      --chr20 $R/.bench_data/human/GRCh37_chr20.fa.gz --reads 1000 --index-threads $(( T > 40 ? T - 8 : T )) \
      --mason-threads 1 > $HS/prepare.out 2>&1 < /dev/null & )
  say "3.1 Gbp genome's preparation started at $(( $(date +%s) - T0 )) s"
}
has human && start_human_prep
# a machine kept from an earlier call keeps its inputs
has peers && [ ! -e mb/chr20.fa.bwt ] && minibwa_index 16
[ -e chr20.h5 ] || peanut_index
[ -e r2.fq ] || simulate_pairs 5000000 24
has se && [ ! -e se.fq ] && simulate_single 10000000 16
wait; say "chr20 prepared after $(( $(date +%s) - T0 )) s"
while has human && [ ! -e $HS/prepare.json ] && pgrep -f "human_scale.py prepare" > /dev/null \
  && [ $(( $(date +%s) - T0 )) -lt ${HUMAN_WAIT:-400} ]; do sleep 2; done
has human && say "3.1 Gbp genome prepared after $(( $(date +%s) - T0 )) s: $(tr -d '\n ' < $HS/prepare.json 2>/dev/null | cut -c1-300)"
head -400000 r1.fq > s1.fq; head -400000 r2.fq > s2.fq
$NEW map -t $T --device $ALLG chr20.h5 s1.fq s2.fq > /dev/null 2> warm.err; say "warm-up rc $? (kernels compiled and cached)"
[ -n "$OLD" ] && { $OLD map -t $T --device $ALLG chr20.h5 s1.fq s2.fq > /dev/null 2> warm_old.err; say "old warm-up rc $?"; }
# run NAME SET CMD...: measured, the run's own summary lines shown, SAM body md5 kept
run() {
  local name=$1 set=$2; shift 2
  say "$($M $name "$@" -o $W/$set.sam | cut -c1-170)"
  grep -h "mapping processes\|reads/s\|stage seconds\|\] exit" $name.err | grep -v "reads done" | cut -c1-240 | tee -a $LOG
  say "md5 $set $name $(grep -v '^@PG' $W/$set.sam | md5sum | cut -c1-16)"; rm -f $W/$set.sam
}
if has open; then  # every GPU or only its own (CUDA_VISIBLE_DEVICES), with or without the platform held, twice each
  for rep in 1 2; do
    for how in "" --visible --parent-open "--visible --parent-open"; do
      say "device_open_time $how: $(env PYTHONPATH=/tmp/new:/tmp/site python3 $R/benchmarks/device_open_time.py $how \
        | tr '\n' ' ' | cut -c1-1000)"
    done
  done
fi
if has chr20; then
  # where the writing process's start goes (imports), once
  env PYTHONPATH=/tmp/new:/tmp/site python3 -X importtime -m peanut_py map -t $T --device 0 chr20.h5 s1.fq s2.fq \
    > /dev/null 2> imp.err
  say "imports of one run (cumulative us, largest): $(grep 'import time' imp.err | sort -t'|' -k2 -n -r | head -6 | tr -s ' ' | tr '\n' ';' | cut -c1-400)"
  run pe_1g_c16 pe taskset -c 0-15 $NEW map -t 16 --device 0 chr20.h5 r1.fq r2.fq
  run pe_1g pe $NEW map -t $T --device 0 chr20.h5 r1.fq r2.fq
  [ -n "$OLD" ] && run pe_1g_old pe $OLD map -t $T --device 0 chr20.h5 r1.fq r2.fq
  run pe_2g pe $NEW map -t $T --device 0,1 chr20.h5 r1.fq r2.fq
  [ -n "$OLD" ] && run pe_2g_old pe $OLD map -t $T --device 0,1 chr20.h5 r1.fq r2.fq
  run pe_allg pe $NEW map -t $T --device $ALLG chr20.h5 r1.fq r2.fq
  [ -n "$OLD" ] && run pe_allg_old pe $OLD map -t $T --device $ALLG chr20.h5 r1.fq r2.fq
  has all && run pe_all pe $NEW map -t $T --device all chr20.h5 r1.fq r2.fq
  run pe_allg_b pe $NEW map -t $T --device $ALLG chr20.h5 r1.fq r2.fq
  [ -n "$OLD" ] && run pe_allg_old_b pe $OLD map -t $T --device $ALLG chr20.h5 r1.fq r2.fq
fi
if has align; then  # the final alignment in the postprocessing threads or on the device, in turns
  for rep in 1 2; do for w in cpu device; do
    run pe_1g_c16_${w}_$rep pe taskset -c 0-15 $NEW map -t 16 --align-on $w --device 0 chr20.h5 r1.fq r2.fq
    run pe_allg_${w}_$rep pe $NEW map -t $T --align-on $w --device $ALLG chr20.h5 r1.fq r2.fq
    has se && run se_1g_c16_${w}_$rep se taskset -c 0-15 $NEW map -t 16 --align-on $w --device 0 chr20.h5 se.fq
  done; done
  for w in ${PROFILE_ALIGN_ON:-cpu device}; do  # the device's kernels and idle time, alignment on the device or not
    n=$([ $w = device ] && echo 99 || echo 0)
    say "== kernel profile pe, 16 cores, --align-on $w"
    env PYTHONPATH=/tmp/new:/tmp/site taskset -c 0-15 python3 $R/benchmarks/kernel_profile.py chr20.h5 r1.fq r2.fq \
      -t 16 --top 16 --gaps 6 --set postprocess.AUTO_DEVICE_MAX_WORKERS=$n -o /dev/null 2>&1 | cut -c1-200 | tee -a $LOG
  done
fi
if has writes; then  # is one output file the bound? (benchmarks/write_rate.py; the runs' SAM to /dev/null, BAM)
  python3 $R/benchmarks/write_rate.py $W --gb 4 --writers 1,2,4,8,16 | tee -a $LOG
  say "$($M pe_1g_c16_null taskset -c 0-15 $NEW map -t 16 --device 0 chr20.h5 r1.fq r2.fq -o /dev/null | cut -c1-170)"
  grep -h "reads/s\|stage seconds" pe_1g_c16_null.err | cut -c1-240 | tee -a $LOG
  say "$($M pe_allg_null $NEW map -t $T --device $ALLG chr20.h5 r1.fq r2.fq -o /dev/null | cut -c1-170)"
  grep -h "mapping processes\|reads/s\|stage seconds" pe_allg_null.err | cut -c1-240 | tee -a $LOG
  say "$($M pe_allg_bam $NEW map -t $T --device $ALLG chr20.h5 r1.fq r2.fq -o $W/pe.bam | cut -c1-170)"
  grep -h "mapping processes\|reads/s" pe_allg_bam.err | cut -c1-240 | tee -a $LOG; rm -f $W/pe.bam
fi
if has peers; then
  say "$($M pe_strobealign strobealign -t $T chr20.fa r1.fq r2.fq)"; say "  $(grep -i 'total time mapping' pe_strobealign.err)"
  say "$($M pe_minibwa minibwa map -t $T mb/chr20.fa r1.fq r2.fq)"
fi
if has se; then  # issue 20's single-end set on one GPU and a 16-core slice, the peers on the same slice
  run se_1g_c16 se taskset -c 0-15 $NEW map -t 16 --device 0 chr20.h5 se.fq
  [ -n "$OLD" ] && run se_1g_c16_old se taskset -c 0-15 $OLD map -t 16 --device 0 chr20.h5 se.fq
  if has peers; then
    say "$($M se_c16_strobealign taskset -c 0-15 strobealign -t 16 chr20.fa se.fq)"
    say "  $(grep -i 'total time mapping' se_c16_strobealign.err)"
    say "$($M se_c16_minibwa taskset -c 0-15 minibwa map -t 16 mb/chr20.fa se.fq)"
  fi
fi
if has big; then
  cat r1.fq r1.fq r1.fq r1.fq > q1.fq; cat r2.fq r2.fq r2.fq r2.fq > q2.fq; say "20 M pairs written at $(( $(date +%s) - T0 )) s"
  run q_1g q $NEW map -t $T --device 0 chr20.h5 q1.fq q2.fq
  run q_allg q $NEW map -t $T --device $ALLG chr20.h5 q1.fq q2.fq
  has align && run q_allg_device q $NEW map -t $T --align-on device --device $ALLG chr20.h5 q1.fq q2.fq
  has align && run q_1g_device q $NEW map -t $T --align-on device --device 0 chr20.h5 q1.fq q2.fq
  [ -n "$OLD" ] && run q_allg_old q $OLD map -t $T --device $ALLG chr20.h5 q1.fq q2.fq
  rm -f q1.fq q2.fq
fi
if has human && [ -e $HS/human_scale.peanut.h5 ]; then
  cat $HS/human_scale.peanut.h5 > /dev/null  # into the page cache, as chr20's index is
  run h_1g h $NEW map -t $T --device 0 $HS/human_scale.peanut.h5 r1.fq r2.fq
  run h_allg h $NEW map -t $T --device $ALLG $HS/human_scale.peanut.h5 r1.fq r2.fq
  run h_2g h $NEW map -t $T --device 0,1 $HS/human_scale.peanut.h5 r1.fq r2.fq
  has halign && run h_allg_device h $NEW map -t $T --align-on device --device $ALLG $HS/human_scale.peanut.h5 r1.fq r2.fq
  has halign && run h_1g_device h $NEW map -t $T --align-on device --device 0 $HS/human_scale.peanut.h5 r1.fq r2.fq
  run h_1g_c16 h taskset -c 0-15 $NEW map -t 16 --device 0 $HS/human_scale.peanut.h5 r1.fq r2.fq
fi
has humanprep && start_human_prep
rm -f *.out
say "total $(( $(date +%s) - T0 )) s"
