#!/bin/bash
# peanut-py on the 3.1 Gbp genome with and without --memory-cap, and the GPU memory each run really holds
# (nvidia-smi), in two calls (a machine stays warm for 30 s between them; the index build runs detached):
#   PHASE=prep    bash benchmarks/gpu_caps.sh   # genome, peanut index -t 16, 2 M chr20 reads (about 7 minutes)
#   PHASE=measure bash benchmarks/gpu_caps.sh   # no cap, 16G, 8G twice each, SAMs compared (about 2 minutes)
# On the GPU host, in the repository root, with .device and .bench_data carried.
set -u
source .device/env.sh > /dev/null
R=$PWD; T0=$(date +%s); HS=/tmp/hs-random
measure() { python3 $R/benchmarks/measure.py "$@"; }
case "${PHASE:-prep}" in
prep)
  python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/new . > /tmp/i-new.log 2>&1 \
    || { tail -5 /tmp/i-new.log; exit 1; }
  mkdir -p $HS && cd $HS && PYTHONPATH=/tmp/new:/tmp/site setsid nohup python3 $R/benchmarks/human_scale.py prepare \
    --work $HS --genome random --chr20 $R/.bench_data/human/GRCh37_chr20.fa.gz --reads 2000000 --index-threads 16 \
    --mason-threads 2 > prepare.out 2>&1 < /dev/null &
  while [ ! -e $HS/prepare.json ] && [ $(( $(date +%s) - T0 )) -lt 570 ]; do sleep 5; done
  cut -c1-250 $HS/prepare.out; echo "prep $(( $(date +%s) - T0 )) s"
  ;;
measure)
  export PYTHONPATH=/tmp/new:/tmp/site
  cd $HS; head -4000 reads.fq > s.fq; python3 -m peanut_py map -t 16 human_scale.peanut.h5 s.fq > /dev/null 2>&1
  for run in none 16G 8G none 16G 8G; do
    arg=""; [ $run != none ] && arg="--memory-cap $run"
    measure cap_$run python3 -m peanut_py map -t 16 $arg human_scale.peanut.h5 reads.fq -o cap_$run.sam
    grep -E "reads in|stage|out of memory" cap_$run.err | sed 's/^.peanut. //' | cut -c1-250
    [ $run != none ] && { cmp <(grep -v '^@PG' cap_none.sam) <(grep -v '^@PG' cap_$run.sam) > /dev/null \
      && echo "  SAM identical to no cap's but for @PG" || echo "  SAM DIFFERS"; }
  done
  python3 $R/benchmarks/measure.py --score truth.sam cap_none.sam
  echo "total $(( $(date +%s) - T0 )) s"
  ;;
esac
