# Sourced by the gpu_*.sh scripts: installs peanut-py from the checkout (or SRC=DIR) into /tmp/new, enters the
# work folder W (set by the caller), starts the clock T0 and unpacks chr20; NEW runs the installed peanut.
S0=$(date +%s); source .device/env.sh > /dev/null
# the peers' prebuilt binaries travel packed (../shared/peers); unpacked once per host
[ -e .device/peers-bin.tar.xz ] && [ ! -x .device/bin/minibwa ] && tar -xJf .device/peers-bin.tar.xz -C .device
S1=$(date +%s)
R=$PWD; mkdir -p $W
python3 -m pip install -q --no-deps --no-build-isolation --target /tmp/new "${SRC:-.}" > $W/i1.log 2>&1 || { tail -5 $W/i1.log; exit 1; }
# the carried wheels went in without bytecode (.device/env.sh); compiled here as a normal install compiles them,
# so that no run pays for compiling pyopencl and numpy at start-up
S2=$(date +%s); python3 -m compileall -q -j 0 /tmp/site > /dev/null 2>&1
echo "set-up: wheels $(( S1 - S0 )) s, peanut-py's installation $(( S2 - S1 )) s, bytecode $(( $(date +%s) - S2 )) s"
cd $W; T0=$(date +%s)
NEW="env PYTHONPATH=/tmp/new:/tmp/site python3 -m peanut_py"
zcat $R/.bench_data/human/GRCh37_chr20.fa.gz > chr20.fa
# tm NAME CMD...: runs CMD with stdout discarded and stderr in NAME.err, prints its exit status and wall time
tm() { local name=$1; shift; local s=$EPOCHREALTIME; "$@" > /dev/null 2> $name.err; local rc=$?; local e=$EPOCHREALTIME; python3 -c "print(\"%-22s rc=%d wall=%.2f s\" % (\"$name\", $rc, $e - $s))"; }
# minibwa_index [THREADS]: chr20's minibwa index under mb/, in the background (`wait` collects it)
minibwa_index() {
  ( mkdir -p mb && ln -sf $W/chr20.fa mb/chr20.fa && minibwa index -t ${1:-4} mb/chr20.fa > mb.log 2>&1
    echo minibwa-index $? ) &
}
# truth_part N SET...: ptruth_SET.sam, the true alignments of SET's first N reads, from truth_SET.sam (removed);
# mason writes the records in the reads' order, a pair's two mates together
truth_part() {
  local n=$1 set; shift
  for set in "$@"; do
    awk -v n=$n '/^@/ {print; next} {if (++k > n) exit; print}' truth_$set.sam > ptruth_$set.sam
    rm -f truth_$set.sam
  done
}
# simulate_pairs N [THREADS [TRUTH]], simulate_single N [THREADS [TRUTH]]: N pairs 2x150 (r1.fq, r2.fq, seed 21)
# or N single-end 100 bp reads (se.fq, seed 22) from chr20, in the background (mason's reads depend on its thread
# count, not on whether it also writes their true alignments to the SAM file TRUTH)
simulate_pairs() {
  mason_simulator -ir chr20.fa -n $1 --illumina-read-length 150 -o r1.fq -or r2.fq --seed 21 \
    --num-threads ${2:-8} ${3:+-oa $3} -q > /dev/null 2>&1 &
}
simulate_single() {
  mason_simulator -ir chr20.fa -n $1 --illumina-read-length 100 -o se.fq --seed 22 \
    --num-threads ${2:-8} ${3:+-oa $3} -q > /dev/null 2>&1 &
}
# simulate_speed_sets [THREADS]: the speed sets, 2.5 M pairs and 5 M single-end reads
simulate_speed_sets() {
  simulate_pairs 2500000 ${1:-8}
  simulate_single 5000000 ${1:-8}
}
# peanut_index: chr20.h5, in the background
peanut_index() {
  ( $NEW index chr20.fa -o chr20.h5 > ix.log 2>&1; echo peanut-index $? ) &
}
# map_peers: minibwa (index from minibwa_index) and strobealign (its own "Total time mapping" line printed),
# -t 16, on the single-end set (se.fq) and the pairs (r1.fq r2.fq); $M is the caller's measure.py command
map_peers() {
  for set in se pe; do
    if [ $set = pe ]; then IN="r1.fq r2.fq"; else IN="se.fq"; fi
    $M ${set}_minibwa minibwa map -t 16 mb/chr20.fa $IN | cut -c1-120; rm -f ${set}_minibwa.out
    $M ${set}_strobealign strobealign -t 16 chr20.fa $IN | cut -c1-120; rm -f ${set}_strobealign.out
    grep -i "total time mapping" ${set}_strobealign.err
  done
}
