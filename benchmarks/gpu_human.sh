#!/bin/bash
# Index format 2 on the GPU host, in two calls (a machine stays warm for 30 s between them):
#   PHASE=start OLD=tarball bash benchmarks/gpu_human.sh    # 3.1 Gbp genome + index + reads (detached), and
#                                                          # chr20: format 1 (OLD, folder old/) against 2
#   PHASE=finish bash benchmarks/gpu_human.sh              # the 3.1 Gbp map: no cap, 16G, 8G
# On the GPU host, in the repository root, with .device and .bench_data carried.
set -u
HS=/tmp/hs
if [ "${PHASE:-start}" = start ]; then
  W=/tmp/w9; source "$(dirname "$0")/gpu_common.sh"
  mkdir -p $HS
  # from the work folder: `python -m peanut_py` in the repository root would take the uncompiled source tree
  ( cd $HS && setsid nohup env PYTHONPATH=/tmp/new:/tmp/site python3 $R/benchmarks/human_scale.py prepare --work $HS \
      --chr20 $R/.bench_data/human/GRCh37_chr20.fa.gz --reads 2000000 --index-threads 16 --mason-threads 4 \
      > $HS/prepare.out 2>&1 < /dev/null & )
  ( mkdir -p /tmp/oldsrc && tar -xzf "$R/$OLD" -C /tmp/oldsrc && python3 -m pip install -q --no-deps --no-build-isolation \
      --target /tmp/old /tmp/oldsrc/old > old-install.log 2>&1; echo old-install $? ) &
  OLDRUN="env PYTHONPATH=/tmp/old:/tmp/site python3 -m peanut_py"
  mason_simulator -ir chr20.fa -n 5000000 --illumina-read-length 100 -o se.fq --seed 22 --num-threads 4 -q > /dev/null 2>&1 &
  $NEW index chr20.fa -o chr20_v2.h5 2> ix2.err; tail -1 ix2.err | cut -c1-150
  wait
  $OLDRUN index chr20.fa -o chr20_v1.h5 2> ix1.err; tail -1 ix1.err | cut -c1-150
  ls -la chr20_v1.h5 chr20_v2.h5 | awk '{print $5, $9}'
  echo "prep $(( $(date +%s) - T0 )) s"
  while [ ! -e $HS/prepare.json ] && [ $(( $(date +%s) - T0 )) -lt 330 ] && pgrep -f "human_scale.py prepare" > /dev/null; do sleep 5; done
  echo "human prepare: $(cat $HS/prepare.json 2>/dev/null | tr -d '\n ' | cut -c1-300) at $(( $(date +%s) - T0 )) s"; tail -3 $HS/prepare.out | cut -c1-200
  head -800000 se.fq > s.fq
  tm warm1 $OLDRUN map -t 16 chr20_v1.h5 s.fq; tm warm2 $NEW map -t 16 chr20_v2.h5 s.fq
  cmp <($OLDRUN map -q -t 16 chr20_v1.h5 s.fq | grep -v '^@PG') <($NEW map -q -t 16 chr20_v2.h5 s.fq | grep -v '^@PG') \
    && echo "SAM of 200,000 reads: identical (format 1 vs 2)"
  for rep in 1 2; do
    [ $(( $(date +%s) - T0 )) -gt 540 ] && break
    tm v1_se_$rep $OLDRUN map -t 16 chr20_v1.h5 se.fq; grep "stage" v1_se_$rep.err | cut -c1-200
    tm v2_se_$rep $NEW map -t 16 chr20_v2.h5 se.fq; grep "stage" v2_se_$rep.err | cut -c1-200
  done
  echo "human prepare running: $(pgrep -f 'human_scale.py prepare' | wc -l); total $(( $(date +%s) - T0 )) s"
else
  source .device/env.sh > /dev/null; T0=$(date +%s)
  while [ ! -e $HS/prepare.json ] && pgrep -f "human_scale.py prepare" > /dev/null && [ $(( $(date +%s) - T0 )) -lt 300 ]; do sleep 5; done
  cat $HS/prepare.out | cut -c1-250
  export PYTHONPATH=/tmp/new:/tmp/site
  R=$PWD; cd $HS
  python3 $R/benchmarks/human_scale.py map --work $HS -t 16 --buffer-reads 262144 2>&1 | cut -c1-250 | tail -30
  head -800000 $HS/reads.fq > $HS/r200k.fq
  for cap in none 16G 8G; do
    [ $(( $(date +%s) - T0 )) -gt 520 ] && break
    arg=""; [ $cap != none ] && arg="--memory-cap $cap"
    python3 - $cap $arg <<'PY'
import os, subprocess, sys, time
cap = sys.argv[1]
cmd = [sys.executable, "-m", "peanut_py", "map", "-t", "16", *sys.argv[2:], "/tmp/hs/human_scale.peanut.h5", "/tmp/hs/r200k.fq", "-o", "/tmp/hs/cap.sam"]
t0 = time.perf_counter(); p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
err = p.stderr.read(); _, status, usage = os.wait4(p.pid, 0)
print(f"cap {cap}: rc {os.waitstatus_to_exitcode(status)}, {time.perf_counter() - t0:.1f} s wall, peak RSS {usage.ru_maxrss / 1024:,.0f} MB")
print("\n".join(l[:260] for l in err.splitlines() if "device:" in l or "reads in" in l or "stage" in l))
PY
  done
  echo "total $(( $(date +%s) - T0 )) s"
fi
