#!/bin/bash
# Postprocessing in processes against threads, and against the version before (OLD=tarball of an earlier
# checkout, its folder named old/), on GRCh37 chr20, -t 16, beside minibwa and strobealign: 5 M single-end
# 100 bp and 2.5 M pairs 2x150 (mason, the seeds of gpu_speed.sh); the second run's
# start-up on 1,000 reads; the SAM of 200,000 pairs compared between the two versions.  On the GPU host, in the
# repository root, with .device and .bench_data carried (docs/gpu.md, "Running on a GPU host").
set -u
W=/tmp/w5; source "$(dirname "$0")/gpu_common.sh"
OLDRUN=""
if [ -n "${OLD:-}" ]; then
  ( mkdir -p /tmp/oldsrc && tar -xf "$R/$OLD" -C /tmp/oldsrc && python3 -m pip install -q --no-deps --no-build-isolation \
      --target /tmp/old /tmp/oldsrc/old > old-install.log 2>&1; echo old-install $? ) &
  OLDRUN="env PYTHONPATH=/tmp/old:/tmp/site python3 -m peanut_py"
fi
minibwa_index
$NEW index chr20.fa -o chr20.h5 2>&1 | tail -1 | cut -c1-120
simulate_speed_sets
wait; echo "prep $(( $(date +%s) - T0 )) s"; ls -la *.fq | awk '{print $5, $9}'
head -4000 se.fq > tiny.fq
tm warm $NEW map -t 16 chr20.h5 tiny.fq; tm tiny1000 $NEW map -t 16 chr20.h5 tiny.fq; grep "device:\|processes" tiny1000.err | cut -c1-160
head -800000 r1.fq > s1.fq; head -800000 r2.fq > s2.fq
$NEW map -t 16 chr20.h5 s1.fq s2.fq -o new.sam 2> new.err
[ -n "$OLDRUN" ] && $OLDRUN map -t 16 chr20.h5 s1.fq s2.fq -o old.sam 2> old.err
[ -n "$OLDRUN" ] && { cmp <(grep -v '^@PG' new.sam) <(grep -v '^@PG' old.sam) && echo "SAM of 200,000 pairs: identical (new vs old)"; }
$NEW map -t 16 --workers threads chr20.h5 s1.fq s2.fq -o thr.sam 2> thr.err
cmp <(grep -v '^@PG' new.sam) <(grep -v '^@PG' thr.sam) && echo "SAM of 200,000 pairs: identical (processes vs threads)"
rm -f new.sam old.sam thr.sam
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  [ -n "$OLDRUN" ] && { tm ${set}_old $OLDRUN map -t 16 chr20.h5 $IN; grep "reads/s\|stage" ${set}_old.err | cut -c1-250; }
  tm ${set}_new $NEW map -t 16 chr20.h5 $IN; grep "reads/s\|stage" ${set}_new.err | cut -c1-250
  tm ${set}_threads $NEW map -t 16 --workers threads chr20.h5 $IN; grep "reads/s\|stage" ${set}_threads.err | cut -c1-250
  tm ${set}_minibwa minibwa map -t 16 mb/chr20.fa $IN
  tm ${set}_strobealign strobealign -t 16 chr20.fa $IN; grep -i "total time mapping\|total time indexing" ${set}_strobealign.err | tr '\n' ' '; echo
  tm ${set}_new2 $NEW map -t 16 chr20.h5 $IN; grep "reads/s" ${set}_new2.err | cut -c1-250
  [ $(( $(date +%s) - T0 )) -gt 500 ] && break
done
echo "total $(( $(date +%s) - T0 )) s"
