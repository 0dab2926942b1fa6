#!/bin/bash
# A change to the device's kernels against the version before it, on the one-GPU host's speed sets (GRCh37
# chr20, 10 M single-end 100 bp, seed 22, and 5 M pairs 2x150, seed 21, from mason; index prebuilt; -t 16):
# both versions in turns, their SAMs compared (all but @PG), the kernels' device time of each (kernel_profile),
# then minibwa and strobealign (its own mapping time) and, while time is left (MINIMAP2_BEFORE seconds since
# the start, 420), minimap2 2.30.
#   OLD_FILES=DIR WDIR=/dev/shm/ws bash benchmarks/gpu_strands.sh
# OLD_FILES holds the earlier version's files, at their paths in the repository, which are laid over a copy of
# this checkout's source, then installed as this one is (default .old_files; so only the changed files travel;
# Cython sources among them are compiled). ONLY_PEANUT=1 leaves out the kernel profiles and the peers. SCORE=1
# has mason write the true alignments and scores both versions' first runs on the first 2 M reads of each set
# (benchmarks/measure.py --score-first). On the GPU host, in the repository root, with .device, .bench_data and
# that folder carried.
set -u
W=${WDIR:-/tmp/ws}; OLD_FILES=$(readlink -f "${OLD_FILES:-.old_files}"); source "$(dirname "$0")/gpu_common.sh"
# the earlier version: this checkout's source with the earlier files laid over it, installed beside this one;
# NEW_FILES=DIR lays a later version's files over this installation (same extensions only)
lay_over() { (cd "$1" && find . -type f) | while read -r f; do cp "$1/$f" "$2/$f"; done; }
rm -rf /tmp/old /tmp/oldsrc && mkdir -p /tmp/oldsrc
tar -C $R --exclude='*.so' --exclude='peanut_py/_*.c' -cf - setup.py pyproject.toml MANIFEST.in README.md peanut_py \
  | tar -xf - -C /tmp/oldsrc
lay_over "$OLD_FILES" /tmp/oldsrc
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/old /tmp/oldsrc > $W/i0.log 2>&1 \
  || { tail -5 $W/i0.log; exit 1; }
[ -n "${NEW_FILES:-}" ] && lay_over "$(readlink -f "$R/$NEW_FILES")" /tmp/new
OLD="env PYTHONPATH=/tmp/old:/tmp/site python3 -m peanut_py"
M="env MEASURE_GPU=0 python3 $R/benchmarks/measure.py"
[ -z "${ONLY_PEANUT:-}" ] && minibwa_index 4
peanut_index
SC=${SCORE:-0}
simulate_pairs 5000000 8 $([ $SC = 1 ] && echo truth_pe.sam)
simulate_single 10000000 8 $([ $SC = 1 ] && echo truth_se.sam)
wait; echo "prep $(( $(date +%s) - T0 )) s"
[ $SC = 1 ] && truth_part 2000000 se pe
head -4000 se.fq > tiny.fq
$NEW map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm_new.err
$OLD map -t 16 chr20.h5 tiny.fq > /dev/null 2> warm_old.err
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  for run in old1 new1 old2 new2; do
    if [ ${run%?} = old ]; then P=$OLD; else P=$NEW; fi
    $M ${set}_$run $P map -t 16 chr20.h5 $IN -o $set.$run.sam | cut -c1-120
    grep "reads/s" ${set}_$run.err | cut -c1-300 || tail -3 ${set}_$run.err
    echo "md5 $(grep -v '^@PG' $set.$run.sam | md5sum | cut -c1-16)"
    if [ $run = new1 ]; then
      cmp -s <(grep -v '^@PG' $set.old1.sam) <(grep -v '^@PG' $set.new1.sam) \
        && echo "$set: old and new SAM identical" || echo "$set: SAM DIFFERS"
    fi
    case $run in old1|new1) ;; *) rm -f $set.$run.sam;; esac
  done
  if [ $SC = 1 ]; then
    for run in old1 new1; do
      python3 $R/benchmarks/measure.py --score-first ptruth_$set.sam $set.$run.sam > $set.$run.score 2>&1 &
    done
    for j in $(jobs -p); do wait $j; done
    for run in old1 new1; do echo "score ${set}_$run $(cat $set.$run.score)"; done
  fi
  rm -f $set.old1.sam $set.new1.sam
done
echo "peanut done $(( $(date +%s) - T0 )) s"
[ -n "${ONLY_PEANUT:-}" ] && exit 0
for v in old new; do
  if [ $v = old ]; then PP=/tmp/old:/tmp/site; else PP=/tmp/new:/tmp/site; fi
  env PYTHONPATH=$PP python3 $R/benchmarks/kernel_profile.py chr20.h5 se.fq -t 16 --top 14 -o /dev/null \
    > prof_se_$v.txt 2>&1
  echo "== kernel profile se $v"; cat prof_se_$v.txt | cut -c1-160 | tail -24
done
echo "profiles done $(( $(date +%s) - T0 )) s"
map_peers
for set in se pe; do
  if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
  [ $(( $(date +%s) - T0 )) -lt ${MINIMAP2_BEFORE:-420} ] && {
    [ -e chr20.mmi ] || minimap2-2.30 -x sr -d chr20.mmi chr20.fa > mm.log 2>&1
    $M ${set}_minimap2 minimap2-2.30 -ax sr -t 16 chr20.mmi $IN | cut -c1-120; rm -f ${set}_minimap2.out; }
done
echo "total $(( $(date +%s) - T0 )) s"
