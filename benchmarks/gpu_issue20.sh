#!/bin/bash
# The speed sets of the "five times the fastest CPU mapper" target on a one-GPU host with 16 cores, the six tools
# in one run: GRCh37 chr20, 10 M single-end 100 bp (seed 22) and 5 M pairs 2x150 (seed 21) from mason, indexes
# prebuilt, -t 16 for every tool: peanut-py, minibwa, strobealign (its own mapping time), minimap2 2.30,
# bwa-mem2 and bwa; bwa-mem2 and bwa map the first SLOW_PART of each set (1/5 by default: the whole sets would
# take them minutes; their rate is steady over a run), then Debian's minimap2 while time is left (LIMIT s).
# Accuracy: after each set's timed runs, every tool's SAM is scored on that first part of the set against
# mason's true alignments (benchmarks/measure.py --score-first, all tools at once), so every tool is judged on
# the same reads; SCORE=0 leaves it out.
# Every line goes to $OUT/issue20.txt as it is printed, and benchmarks/same_run_table.py turns the lines into the
# table of reads/s per tool and set ($OUT/issue20.md). On the GPU host, in the repository root, with .device and
# .bench_data carried; WDIR=/dev/shm/w20 keeps inputs and outputs in memory.
set -u
W=${WDIR:-/tmp/w20}; source "$(dirname "$0")/gpu_common.sh"
LOG=${OUT:-$W}/issue20.txt; : > $LOG
say() { echo "$*" | tee -a $LOG; }
M="env MEASURE_GPU=0 python3 $R/benchmarks/measure.py"
PART=${SLOW_PART:-5}
say "host: $(nproc) cores, $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $(git -C $R log -1 --format=%h 2>/dev/null)"
minibwa_index 2
( minimap2-2.30 -x sr -d chr20.mmi chr20.fa > mm.log 2>&1; echo mm2-index $? ) &
( bwa index chr20.fa > bwa.log 2>&1; echo bwa-index $? ) &
( bwa-mem2 index -p chr20.bm2 chr20.fa > bm2.log 2>&1; echo bwa-mem2-index $? ) &
peanut_index
SC=${SCORE:-1}
simulate_pairs 5000000 6 $([ $SC = 1 ] && echo truth_pe.sam)
simulate_single 10000000 6 $([ $SC = 1 ] && echo truth_se.sam)
for j in $(jobs -p); do wait $j; done; say "prepared after $(( $(date +%s) - T0 )) s"
head -$(( 4 * 5000000 / PART )) r1.fq > p1.fq; head -$(( 4 * 5000000 / PART )) r2.fq > p2.fq
head -$(( 4 * 10000000 / PART )) se.fq > pse.fq
# the truth of that part
[ $SC = 1 ] && truth_part $(( 10000000 / PART )) se pe
head -4000 se.fq > tiny.fq; $NEW map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm.err
# one NAME READS CMD...: a tool on a set, measured (READS: how many reads it maps, for the table)
one() {
  local name=$1 reads=$2; shift 2
  say "$($M $name "$@" | cut -c1-150) reads=$reads"
  grep -h "reads/s" $name.err | grep -v "reads done" | cut -c1-250 | tee -a $LOG
  grep -hi "total time mapping" $name.err | sed "s/^/$name /" | tee -a $LOG
  [ -n "${KEEP_MD5:-}" ] && say "md5 $name $(grep -v '^@PG' $name.out | md5sum | cut -c1-16)"
  [ $SC = 1 ] || rm -f $name.out
}
# score SET: every SAM of the set scored on its first part, in parallel, then removed
score() {
  [ $SC = 1 ] || return 0
  for f in $1_*.out; do python3 $R/benchmarks/measure.py --score-first ptruth_$1.sam $f > $f.score 2>&1 & done
  for j in $(jobs -p); do wait $j; done
  cat $1_*.out.score | tee -a $LOG; rm -f $1_*.out $1_*.out.score
}
N=10000000  # reads of either set (pairs: 5 M of each mate)
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; PIN="p1.fq p2.fq"; else IN="se.fq"; PIN=pse.fq; fi
  KEEP_MD5=1 one ${set}_peanut $N $NEW map -t 16 chr20.h5 $IN
  one ${set}_minibwa $N minibwa map -t 16 mb/chr20.fa $IN
  one ${set}_strobealign $N strobealign -t 16 chr20.fa $IN
  one ${set}_minimap2-2.30 $N minimap2-2.30 -ax sr -t 16 chr20.mmi $IN
  one ${set}_bwa-mem2 $(( N / PART )) bwa-mem2 mem -t 16 chr20.bm2 $PIN
  one ${set}_bwa $(( N / PART )) bwa mem -t 16 chr20.fa $PIN
  KEEP_MD5=1 one ${set}_peanut_b $N $NEW map -t 16 chr20.h5 $IN
  score $set
done
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  [ $(( $(date +%s) - T0 )) -lt ${LIMIT:-330} ] && { one ${set}_minimap2-2.24 $N minimap2 -ax sr -t 16 chr20.mmi $IN
    score $set; }
done
python3 $R/benchmarks/same_run_table.py $LOG > ${OUT:-$W}/issue20.md && cat ${OUT:-$W}/issue20.md
say "total $(( $(date +%s) - T0 )) s"
