"""Plain-Python reference of the final alignment (_align.pyx, peanut_py/kernels/affine.cl): a full-matrix Gotoh, an
independent MD/CIGAR/NM consistency checker, random read/window pairs with planted edits, batch packing, and
the real NA12878 data (GRCh37 chr20 region, bwa's BAM, the FASTQ) that test_align.py and
test_align_device.py compare against."""
import gzip
import re

import numpy as np

from helpers import SHARED_DATA, require_shared_data

NEG = -(1 << 30)
VALID_MIN = -(1 << 29)
LETTERS = "ACGTN"
BWA_MEM = dict(A=1, B=4, O=6, E=1, ambig=1, clip=5)

HUMAN = SHARED_DATA / "human"
REF_FA = HUMAN / "GRCh37_chr20.fa.gz"
BAM = HUMAN / "NA12878_S1.chr20.10_10p1mb.bam"
FASTQ = HUMAN / "NA12878_S1.chr20_10.0-10.1Mb_R1.fastq.gz"
REGION = (9_900_000, 10_200_000)


# ------------------------------------------------------------------ plain-Python reference (full matrices)

def ref_align(read, ref, gstart, lo, hi, local, A, B, O, E, ambig, clip):
    """Gotoh on full (m+1) x (n+1) matrices, cells outside the band held at NEG; traceback by recomputing
    which predecessor produced each value (docs/alignment.md gives the rules)."""
    read = [int(x) for x in read]
    ref = [int(x) for x in ref]
    m, n = len(read), len(ref)

    def s(a, b):
        if a == 4 or b == 4:
            return -ambig
        return A if a == b else -B

    def inband(i, j):
        return lo <= j - i <= hi

    H = [[NEG] * (n + 1) for _ in range(m + 1)]
    Em = [[NEG] * (n + 1) for _ in range(m + 1)]
    Fm = [[NEG] * (n + 1) for _ in range(m + 1)]
    for j in range(n + 1):
        if inband(0, j):
            H[0][j] = 0
    best = None  # (t, i, j)
    for i in range(1, m + 1):
        for j in range(max(0, i + lo), min(n, i + hi) + 1):
            d = H[i - 1][j - 1] + s(read[i - 1], ref[j - 1]) if j > 0 else NEG
            f = max(H[i - 1][j] - O - E, Fm[i - 1][j] - E)
            hl, el = (H[i][j - 1], Em[i][j - 1]) if j > 0 else (NEG, NEG)
            e = max(hl - O - E, el - E)
            h = max(d, e, f, -clip) if local else max(d, e, f)
            H[i][j], Em[i][j], Fm[i][j] = h, e, f
            fresh = local and h == -clip
            if (local and not fresh) or (not local and i == m):
                t = h - (clip if local and i < m else 0)
                if t <= VALID_MIN:
                    continue
                if best is None or t > best[0] or (t == best[0] and (j < best[2] or (j == best[2] and i > best[1]))):
                    best = (t, i, j)
    if best is None:
        return None
    _, i, j = best
    end_i, end_j = i, j
    ops = []  # reversed, one op per column
    state = "H"
    while True:
        if state == "H":
            if i == 0 or (local and H[i][j] == -clip):
                break
            if j > 0 and H[i][j] == H[i - 1][j - 1] + s(read[i - 1], ref[j - 1]):
                ops.append("M")
                i, j = i - 1, j - 1
            elif H[i][j] == Em[i][j]:
                state = "E"
            else:
                assert H[i][j] == Fm[i][j]
                state = "F"
        elif state == "E":
            ops.append("D")
            opened = Em[i][j] == H[i][j - 1] - O - E
            j -= 1
            state = "H" if opened else "E"
        else:
            ops.append("I")
            opened = Fm[i][j] == H[i - 1][j] - O - E
            i -= 1
            state = "H" if opened else "F"
    if "M" not in ops:
        return None
    ops.reverse()
    # score, NM, MD straight from the columns
    score = nm = 0
    md, run = [], 0
    q, r = i, j
    prev = None
    for op in ops:
        if op == "M":
            sc = s(read[q], ref[r])
            score += sc
            if read[q] == ref[r] and read[q] != 4:
                run += 1
            else:
                nm += 1
                md.append(f"{run}{LETTERS[ref[r]]}")
                run = 0
            q, r = q + 1, r + 1
        elif op == "D":
            score -= E + (O if prev != "D" else 0)
            nm += 1
            if prev != "D":
                md.append(f"{run}^")
                run = 0
            md.append(LETTERS[ref[r]])
            r += 1
        else:
            score -= E + (O if prev != "I" else 0)
            nm += 1
            q += 1
        prev = op
    md.append(str(run))
    cols = (["S"] * i if i > 0 else []) + ops + (["S"] * (m - end_i) if m > end_i else [])
    runs = [(k, len(g)) for k, g in _groups(cols)]
    cig = "".join(f"{length}{op}" for op, length in runs)
    return dict(pos=gstart + j, ref_end=gstart + end_j, read_begin=i, read_end=end_i,
                score=score, nm=nm, cigar=cig, md="".join(md))


def _groups(seq):
    out = []
    for x in seq:
        if out and out[-1][0] == x:
            out[-1][1].append(x)
        else:
            out.append((x, [x]))
    return out


# ------------------------------------------------------------------ independent consistency checker

MD_RE = re.compile(r"^[0-9]+(([A-Z]|\^[A-Z]+)[0-9]+)*$")


def check_consistency(read, window, gstart, aln):
    """Rebuild the reference from read + CIGAR + MD, compare it with the window, recount NM."""
    read_s = "".join(LETTERS[c] for c in read)
    win_s = "".join(LETTERS[c] for c in window)
    ops = [(int(length), op) for length, op in re.findall(r"(\d+)([MIDS])", aln.cigar_string)]
    assert "".join(f"{length}{op}" for length, op in ops) == aln.cigar_string
    assert sum(length for length, op in ops if op in "MIS") == len(read)
    assert all(op != "S" for _, op in ops[1:-1]), "soft clips only at the ends"
    assert ops[0][1] != "D" and ops[-1][1] != "D"
    assert MD_RE.match(aln.md), aln.md
    assert (ops[0][1] == "S") == (aln.read_begin > 0) and aln.read_end == len(read) - (ops[-1][0] if ops[-1][1] == "S" else 0)
    # aligned columns of the read, in reference order; None marks a deleted base
    cols, q = [], 0
    for length, op in ops:
        if op == "M":
            cols += [read_s[q + k] for k in range(length)]
            q += length
        elif op in "IS":
            q += length
        else:
            cols += [None] * length
    tokens = re.findall(r"\d+|\^[A-Z]+|[A-Z]", aln.md)
    rebuilt, c, mismatches = [], 0, 0
    for tok in tokens:
        if tok.isdigit():
            for _ in range(int(tok)):
                assert cols[c] is not None and cols[c] != "N", "MD match must be an aligned non-N read base"
                rebuilt.append(cols[c])
                c += 1
        elif tok[0] == "^":
            for ch in tok[1:]:
                assert cols[c] is None
                rebuilt.append(ch)
                c += 1
        else:
            assert cols[c] is not None and (cols[c] != tok or tok == "N")
            rebuilt.append(tok)
            mismatches += 1
            c += 1
    assert c == len(cols)
    off = aln.pos - gstart
    assert "".join(rebuilt) == win_s[off:off + len(rebuilt)]
    assert aln.ref_end == aln.pos + len(rebuilt)
    indel = sum(length for length, op in ops if op in "ID")
    assert aln.nm == mismatches + indel


# ------------------------------------------------------------------ random pairs with planted edits

def random_pair(rng):
    """A window and a read drawn from it with substitutions, indels (some at the ends), Ns in the read and
    ambiguous window bases; returns read, window, band around the true start diagonal."""
    m = int(rng.integers(1, 70)) if rng.random() < 0.1 else int(rng.integers(20, 70))
    pad = int(rng.integers(0, 15))
    window = rng.integers(0, 4, size=m + 2 * pad + 12).astype(np.uint8)
    if rng.random() < 0.3:  # low-complexity stretch: many equivalent gap placements
        a = int(rng.integers(0, len(window)))
        window[a:a + int(rng.integers(3, 12))] = rng.integers(0, 4)
    src = list(window[pad:pad + m + 6])
    read = []
    k = 0
    while len(read) < m and k < len(src):
        x = rng.random()
        near_end = len(read) < 4 or len(read) > m - 5
        p_indel = 0.08 if near_end else 0.02
        if x < p_indel:  # deletion from the read
            k += int(rng.integers(1, 5))
        elif x < 2 * p_indel:  # insertion into the read
            read += list(rng.integers(0, 4, size=int(rng.integers(1, 5))))
        else:
            b = src[k]
            k += 1
            if rng.random() < 0.05:
                b = (b + int(rng.integers(1, 4))) % 4
            read.append(b)
    read = np.array(read[:m], dtype=np.uint8)
    read[rng.random(read.size) < 0.02] = 4
    window[rng.random(window.size) < 0.01] = 4
    w = int(rng.integers(0, 12))
    shift = int(rng.integers(-3, 4)) if rng.random() < 0.2 else 0  # band not centred on the truth
    lo, hi = pad - w + shift, pad + w + shift
    if rng.random() < 0.1:
        lo, hi = -int(rng.integers(0, 20)), len(window) + int(rng.integers(0, 5))  # whole matrix
    return read, window, lo, hi


def make_batch(pairs):
    reads = [p[0] for p in pairs]
    wins = [p[1] for p in pairs]
    roff = np.concatenate([[0], np.cumsum([r.size for r in reads])]).astype(np.int64)
    foff = np.concatenate([[0], np.cumsum([w.size for w in wins])]).astype(np.int64)
    rseq = np.concatenate(reads) if reads else np.zeros(0, np.uint8)
    fseq = np.concatenate(wins) if wins else np.zeros(0, np.uint8)
    return rseq, roff, fseq, foff


# ------------------------------------------------------------------ real reads: NA12878 on GRCh37 chr20

CODE = np.full(256, 4, dtype=np.uint8)
for _i, _c in enumerate(b"ACGT"):
    CODE[_c] = _i
    CODE[_c + 32] = _i


def to_codes(seq):
    return CODE[np.frombuffer(seq.encode() if isinstance(seq, str) else seq, dtype=np.uint8)]


def load_region(start, end):
    """chr20[start:end] as codes, streaming the plain-gzip FASTA only as far as needed."""
    parts, have = [], 0
    with gzip.open(REF_FA, "rb") as f:
        assert f.readline().startswith(b">20")
        while have < end:
            block = f.read(1 << 22)
            if not block:
                break
            block = block.replace(b"\n", b"")
            parts.append(block)
            have += len(block)
    seq = b"".join(parts)
    return to_codes(seq[start:end])


def require_real_data():
    """Skip (or, under CI=true, fail) the calling test unless the chr20 FASTA, bwa's BAM and the FASTQ are
    present (helpers.require_shared_data)."""
    for path in (REF_FA, BAM, FASTQ):
        require_shared_data("human", path.name)
