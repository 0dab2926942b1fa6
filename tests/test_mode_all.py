"""Mode all's sensitivity guarantee end to end: reads of 100 bp with exactly 4 planted edits
(benchmarks/planted.py) in real chr20 sequence, masked q-grams listed by the index, and which reads the
guarantee covers (checked by brute force over the region's q-grams)."""
import gzip
import sys

import h5py
import numpy as np
import pytest

from helpers import REPO, run_cli

sys.path.insert(0, str(REPO))  # benchmarks/ is a package of the repository, not of the installed peanut_py
from benchmarks import planted  # noqa: E402

Q = 16
MASK = 3  # low, so that a 1 Mb region has repeats masked as a whole genome has
EDITS = 4  # e_g(100) = 5 at q = 16, step 1


@pytest.fixture(scope="module")
def region_world(shared_data, tmp_path_factory):
    with gzip.open(shared_data / "human" / "GRCh37_chr20.fa.gz", "rt") as f:
        f.readline()
        chrom = "".join(line.strip() for line in f).upper()
    region = chrom[30_000_000:31_000_000]
    folder = tmp_path_factory.mktemp("mode_all")
    fasta = folder / "region.fa"
    fasta.write_text(">region\n" + "\n".join(region[i:i + 60] for i in range(0, len(region), 60)) + "\n")
    index = folder / "region.h5"
    rc, _, err = run_cli("index", str(fasta), "-o", str(index), "-m", str(MASK))
    assert rc == 0, err
    counts = {}
    for v in planted.qgram_values(region, Q).values():
        counts[v] = counts.get(v, 0) + 1
    masked = {v for v, c in counts.items() if c > MASK}
    reads = planted.simulate([("region", region)], 600, length=100, edits=EDITS, seed=7)
    prefix = folder / "planted"
    planted.write_set(reads, prefix, EDITS)
    return dict(folder=folder, region=region, index=index, masked=masked, reads=reads,
                fastq=folder / "planted.fq", truth=folder / "planted.truth.tsv")


def index_without_list(world, folder):
    """A copy of the region's index without its list of masked q-grams (as older versions wrote it)."""
    old = folder / "old.h5"
    old.write_bytes(world["index"].read_bytes())
    with h5py.File(old, "r+") as h5:
        del h5["qgrams/masked"]
    return old


def map_all(world, index, out, *extra):
    rc, _, err = run_cli("map", str(index), str(world["fastq"]), "-o", str(out), "--mode", "all", "--secondary",
                         "--max-hits", "10000", "-t", "2", *extra)
    assert rc == 0, err
    found, _ = planted.score(planted.read_truth(world["truth"]), out)
    return found, err


def test_planted_reads_have_exactly_the_edits(region_world):
    """Every read is 100 bp, within 4 edits of its origin (edit distance by dynamic programming), and the
    generator is reproducible."""
    reads = region_world["reads"]
    region = region_world["region"]
    for name, seq, _, start, end, strand in reads[:200]:
        assert len(seq) == 100
        ref = region[start:end]
        if strand == "-":
            seq = seq.translate(planted.COMPLEMENT)[::-1]
        prev = list(range(len(ref) + 1))
        for i, a in enumerate(seq, 1):
            cur = [i] + [0] * len(ref)
            for j, b in enumerate(ref, 1):
                cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a != b))
            prev = cur
        assert 1 <= prev[-1] <= EDITS, name
    assert planted.simulate([("region", region)], 600, 100, EDITS, seed=7) == reads
    assert {r[5] for r in reads} == {"+", "-"}


def test_index_lists_its_masked_qgrams(region_world):
    from peanut_py.reference import ReferenceIndex

    with ReferenceIndex(region_world["index"]) as index:
        got = index.masked_kmers()
        assert int(index.attrs["kmers_masked"]) == len(got)
    assert got.tolist() == sorted(region_world["masked"])
    assert len(got) > 1000


def test_mode_all_finds_every_read_with_a_hit_at_its_origin(region_world, tmp_path):
    """The guarantee: a read with at most e_g edits is found at its origin unless every q-gram of it that
    would hit the origin is masked.  Many reads here hold more masked q-grams than the votes threshold, and
    they are found too; an index without the list of masked q-grams (as written by older versions) loses some
    of them, and says so."""
    from peanut_py.filtration import votes_threshold

    world = region_world
    found, err = map_all(world, world["index"], tmp_path / "all.sam")
    t = votes_threshold(100, Q)
    guaranteed, heavy, outside = [], 0, []
    for read in world["reads"]:
        hits, m = planted.origin_hits(read, world["region"], EDITS, world["masked"], Q)
        if hits:
            guaranteed.append(read[0])
            heavy += m >= t
        else:
            outside.append(read[0])
    missed = [name for name in guaranteed if name not in found]
    assert not missed, f"{len(missed)} of {len(guaranteed)} reads inside the guarantee not found: {missed[:5]}"
    assert heavy > 100 and len(outside) >= 1, (heavy, len(outside))

    old = index_without_list(world, tmp_path)
    found_old, err_old = map_all(world, old, tmp_path / "old.sam")
    assert "built before indexes listed their masked q-grams" in err_old
    assert "masked q-grams" not in err
    lost = [name for name in guaranteed if name not in found_old]
    assert len(lost) >= 5 and found_old <= found


def farther_than_origin(world, index, out):
    """`peanut map` (mode best) of the planted reads: the names of those whose primary record neither lies
    at their origin (nor names it in XA) nor has at most EDITS edits (NM) elsewhere."""
    rc, _, err = run_cli("map", str(index), str(world["fastq"]), "-o", str(out), "-t", "2")
    assert rc == 0, err
    found, _ = planted.score(planted.read_truth(world["truth"]), out)
    farther = set()
    for line in out.read_text().splitlines():
        f = line.split("\t")
        if line.startswith("@") or int(f[1]) & 0x900 or f[0] in found:
            continue
        nm = [int(t[5:]) for t in f[11:] if t.startswith("NM:i:")]
        if int(f[1]) & 4 or nm[0] > EDITS:
            farther.add(f[0])
    return farther


def test_mode_best_lowers_the_threshold_by_the_masked_qgrams(region_world, tmp_path):
    """Mode best lowers each read strand's votes threshold, and its selection the votes a rival needs, by the
    strand's masked q-grams, as mode all does: every read inside the guarantee gets a primary hit with at most
    its planted edits (at its origin or at a copy as close). With the plain threshold (an index without the
    list) reads over masked q-grams lose their origin and some end farther away or unmapped."""
    world = region_world
    guaranteed = [read[0] for read in world["reads"]
                  if planted.origin_hits(read, world["region"], EDITS, world["masked"], Q)[0]]
    best = farther_than_origin(world, world["index"], tmp_path / "best.sam")
    farther = [name for name in guaranteed if name in best]
    assert not farther, f"{len(farther)} of {len(guaranteed)} reads placed farther than their origin: {farther[:5]}"

    old = index_without_list(world, tmp_path)
    plain = farther_than_origin(world, old, tmp_path / "plain.sam")
    farther_plain = [name for name in guaranteed if name in plain]
    assert len(farther_plain) >= 5, len(farther_plain)
