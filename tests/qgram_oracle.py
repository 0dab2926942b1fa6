"""Plain NumPy q-grams of read buffers: the reference that ReadBuffer, QGroupIndex (test_qgroup.py) and
filtration (test_filtration.py) are checked against, and a deliberately simple FASTQ reader."""
import gzip

import numpy as np

CODE = np.full(256, 4, dtype=np.uint8)
for _i, _b in enumerate(b"ACGT"):
    CODE[_b] = _i
    CODE[_b + 32] = _i  # lowercase


def read_fastq_codes(path, n_reads):
    """First ``n_reads`` sequences of a gzipped FASTQ as (codes, offsets); a deliberately simple parser."""
    seqs = []
    with gzip.open(path, "rb") as f:
        for i, line in enumerate(f):
            if i % 4 == 1:
                seqs.append(CODE[np.frombuffer(line.rstrip(b"\r\n"), dtype=np.uint8)])
                if len(seqs) == n_reads:
                    break
    offsets = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    return np.concatenate(seqs).astype(np.uint8), offsets


def ref_text(codes, offsets):
    """Forward then reverse complement of every read, with rs_start and pos_rs, read by read."""
    parts, rs_start, pos_rs = [], [0], []
    for r in range(len(offsets) - 1):
        fwd = np.minimum(codes[offsets[r] : offsets[r + 1]], 4)
        rev = np.where(fwd[::-1] < 4, 3 - fwd[::-1], 4).astype(np.uint8)
        for strand, seq in enumerate((fwd, rev)):
            parts.append(seq)
            pos_rs.append(np.full(len(seq), 2 * r + strand, dtype=np.uint32))
            rs_start.append(rs_start[-1] + len(seq))
    cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
    return cat(parts, np.uint8), np.array(rs_start, dtype=np.uint32), cat(pos_rs, np.uint32)


def ref_qgrams(text, rs_start, pos_rs, q):
    """(value, text position) of every q-gram inside one read strand without N, in text order."""
    n = len(text)
    if n < q:
        return np.zeros(0, np.uint64), np.zeros(0, np.uint32)
    win = np.lib.stride_tricks.sliding_window_view(text, q)
    t = np.arange(n - q + 1)
    ok = (win < 4).all(axis=1) & (t + q <= rs_start[pos_rs[: n - q + 1].astype(np.int64) + 1])
    weights = (np.uint64(4) ** np.arange(q - 1, -1, -1, dtype=np.uint64)).astype(np.uint64)
    g = (win[ok].astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    return g, t[ok].astype(np.uint32)
