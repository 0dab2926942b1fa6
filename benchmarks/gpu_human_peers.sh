#!/bin/bash
# The 3.1 Gbp genome on the GPU host with the peers beside peanut-py, in three calls (a machine stays warm
# for 30 s between them; the index builds run detached across the calls):
#   PHASE=start bash benchmarks/gpu_human_peers.sh   # genome, peanut index, reads; minimap2 and minibwa indexes
#   PHASE=map   bash benchmarks/gpu_human_peers.sh   # peanut map: no cap, --memory-cap 16G and 8G; minimap2 2.30
#   PHASE=peers bash benchmarks/gpu_human_peers.sh   # strobealign (indexes in memory), minibwa
#   PHASE=caps  bash benchmarks/gpu_human_peers.sh   # alone (one call): peanut-py's caps, twice each, and one
#                                                    # read buffer's device time per cap (core_kernels.py)
# On the GPU host, in the repository root, with .device and .bench_data carried.  bwa and bwa-mem2 are not
# run: their index builds take about an hour on one core for a human-sized genome.
set -u
HS=/tmp/hs
READS=${READS:-1000000}
# measure NAME CMD...: wall clock, peak RSS and GPU memory of CMD (stdout to NAME.out, stderr to NAME.err);
# score SAM: placement accuracy against mason's truth (both benchmarks/measure.py)
measure() { python3 $R/benchmarks/measure.py "$@"; }
score() { python3 $R/benchmarks/measure.py --score $HS/truth.sam "$1"; }
source .device/env.sh > /dev/null
R=$PWD; T0=$(date +%s)
mkdir -p $HS; cd $HS
# each phase installs the checkout it came with (the map phase may bring newer code than the detached build's)
NEW=/tmp/new-${PHASE:-start}
export PYTHONPATH=$NEW:/tmp/site
if [ "${PHASE:-start}" != peers ]; then
  rm -rf $NEW; python3 -m pip install -q --no-deps --no-build-isolation --target $NEW "$R" \
    > i1-${PHASE:-start}.log 2>&1 || { tail -5 i1-${PHASE:-start}.log; exit 1; }
fi
case "${PHASE:-start}" in
start)
  setsid nohup python3 $R/benchmarks/human_scale.py prepare --work $HS --chr20 $R/.bench_data/human/GRCh37_chr20.fa.gz \
    --reads 2000000 --index-threads 16 --mason-threads 4 > prepare.out 2>&1 < /dev/null &
  # the genome is written first; its log line comes once the FASTA is complete
  while ! grep -q "genome:" prepare.out 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt 120 ]; do sleep 2; done
  echo "genome ready at $(( $(date +%s) - T0 )) s: $(grep '^genome:' prepare.out)"
  ( setsid nohup bash -c "cd $HS; python3 $R/benchmarks/measure.py mm2_index minimap2-2.30 -x sr -d human_scale.mmi human_scale.fa > mm2_index.time" < /dev/null > /dev/null 2>&1 & )
  ( setsid nohup bash -c "cd $HS; mkdir -p mb; ln -sf $HS/human_scale.fa mb/human_scale.fa; python3 $R/benchmarks/measure.py mb_index minibwa index -t 8 mb/human_scale.fa > mb_index.time" < /dev/null > /dev/null 2>&1 & )
  while [ $(( $(date +%s) - T0 )) -lt 560 ] && [ ! -e prepare.json ]; do sleep 10; done
  cat prepare.out | cut -c1-250; cat mm2_index.time mb_index.time 2>/dev/null
  echo "running: $(pgrep -fa 'human_scale.py prepare|minimap2-2.30|minibwa index' | cut -c1-80 | tr '\n' ';')"
  ;;
map)
  while [ ! -e prepare.json ] && [ $(( $(date +%s) - T0 )) -lt 240 ]; do sleep 5; done
  cat prepare.out | cut -c1-250; cat mm2_index.time mb_index.time 2>/dev/null
  ls -la human_scale.* | awk '{print $5, $9}'
  head -$(( 4 * READS )) reads.fq > r.fq
  head -4000 r.fq > s.fq; measure warm python3 -m peanut_py map -t 16 human_scale.peanut.h5 s.fq
  for cap in none 16G 8G; do
    [ $(( $(date +%s) - T0 )) -gt 420 ] && break
    arg=""; [ $cap != none ] && arg="--memory-cap $cap"
    measure peanut_$cap python3 -m peanut_py map -t 16 $arg human_scale.peanut.h5 r.fq -o peanut_$cap.sam
    grep -E "device:|reads in|stage" peanut_$cap.err | cut -c1-300
    [ $cap != none ] && { cmp peanut_none.sam peanut_$cap.sam > /dev/null && echo "  SAM identical to no cap" || echo "  SAM DIFFERS"; }
  done
  score peanut_none.sam
  while pgrep -f "minimap2-2.30 -x sr -d" > /dev/null && [ $(( $(date +%s) - T0 )) -lt 480 ]; do sleep 5; done
  cat mm2_index.time 2>/dev/null
  if [ -e mm2_index.time ]; then
    measure mm2_map minimap2-2.30 -ax sr -t 16 human_scale.mmi r.fq; mv mm2_map.out mm2.sam; score mm2.sam
  fi
  echo "running: $(pgrep -fa 'minibwa index' | cut -c1-80 | tr '\n' ';') at $(( $(date +%s) - T0 )) s"
  ;;
caps)
  [ -e prepare.json ] || python3 $R/benchmarks/human_scale.py prepare --work $HS \
    --chr20 $R/.bench_data/human/GRCh37_chr20.fa.gz --reads $READS --index-threads 16 --mason-threads 8 | cut -c1-250
  head -$(( 4 * READS )) reads.fq > r.fq; head -4000 r.fq > s.fq
  measure warm python3 -m peanut_py map -t 16 human_scale.peanut.h5 s.fq
  for rep in 1 2; do
    for cap in none 16G 8G; do
      arg=""; [ $cap != none ] && arg="--memory-cap $cap"
      measure peanut_$cap python3 -m peanut_py map -t 16 $arg human_scale.peanut.h5 r.fq -o peanut_$cap.sam
      grep -E "device:|reads in|stage" peanut_$cap.err | cut -c1-300
      [ $cap != none ] && { cmp <(grep -v '^@PG' peanut_none.sam) <(grep -v '^@PG' peanut_$cap.sam) > /dev/null \
        && echo "  SAM identical to no cap's but for @PG" || echo "  SAM DIFFERS"; }
    done
  done
  score peanut_none.sam
  # one read buffer (244,000 reads, what a batch at 8G holds) per cap; from a copy of benchmarks/ so that
  # the installed package, not the uncompiled checkout, is imported
  mkdir -p /tmp/bx && cp -r $R/benchmarks /tmp/bx/; head -976000 r.fq > b.fq
  for cap in none 16G 8G; do
    arg=""; [ $cap != none ] && arg="--memory-cap $cap"
    echo "core kernels, cap $cap:"
    python3 /tmp/bx/benchmarks/core_kernels.py --index human_scale.peanut.h5 --fastq b.fq --runs 2 $arg 2>&1 \
      | grep -E "device:|filtration|total" | cut -c1-200
  done
  echo "total $(( $(date +%s) - T0 )) s"
  ;;
peers)
  measure strobealign strobealign -t 16 human_scale.fa r.fq; mv strobealign.out strobealign.sam
  grep -E "Total time (indexing|mapping)" strobealign.err; score strobealign.sam
  cat mb_index.time 2>/dev/null
  if [ -e mb_index.time ] && ! pgrep -f "minibwa index" > /dev/null; then
    measure minibwa minibwa map -t 16 mb/human_scale.fa r.fq; mv minibwa.out minibwa.sam; score minibwa.sam
  fi
  ls -la human_scale.mmi mb/ 2>/dev/null | awk '{print $5, $9}'
  echo "total $(( $(date +%s) - T0 )) s"
  ;;
esac
