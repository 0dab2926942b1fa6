"""Lists of hits ``(rs, ref_start, ref_end, dist)`` on the host, as the device stage and mate rescue pass them
on: merging new hits into validated ones, and the clipped search's flags from each read's best distance. The
work runs in _hit_lists.pyx without the interpreter lock, since the device thread does it between kernels
while the postprocessing threads want the lock."""
import numpy as np

from ._hit_lists import is_sorted, merge_sorted, weak_read_flags

# the types of a hit list's four arrays after a merge
HIT_DTYPES = (np.uint32, np.uint32, np.int64, np.int32)
_ALL = np.zeros(0, dtype=np.uint8)


def merge_hits(base, extra, keep=None):
    """The hits of ``base`` (those where ``keep``, a bool mask, is true; all without it) plus those of
    ``extra``, stably sorted by rs: within a read strand base's hits first, each list in its own order.
    Lists already in rs order (the validated hits, the clipped step's) merge in one pass; others are sorted."""
    base = [np.ascontiguousarray(a, dtype=t) for a, t in zip(base, HIT_DTYPES)]
    extra = [np.ascontiguousarray(a, dtype=t) for a, t in zip(extra, HIT_DTYPES)]
    if is_sorted(base[0]) and is_sorted(extra[0]):
        flags = _ALL if keep is None else np.ascontiguousarray(keep, dtype=bool).view(np.uint8)
        return merge_sorted(*base, flags, *extra)
    if keep is not None:
        base = [a[keep] for a in base]
    order = np.argsort(np.concatenate([base[0], extra[0]]), kind="stable")
    return tuple(np.concatenate([b, e])[order] for b, e in zip(base, extra))


def weak_reads_and_flags(n_reads, rs, dist, lengths, max_errors):
    """The local-mode step's flags (clipped.py): per read ``weak`` (it has hits, the best ``dist`` above half
    of ``max_errors[length]``) and ``has_hit`` (uint8: a hit, and not weak), per hit ``kept`` (its read is not
    weak). ``lengths``: per read; ``max_errors``: indexed by a read length."""
    return weak_read_flags(int(n_reads), np.ascontiguousarray(rs, dtype=np.uint32),
                           np.ascontiguousarray(dist, dtype=np.int32), np.ascontiguousarray(lengths, dtype=np.int64),
                           np.ascontiguousarray(max_errors, dtype=np.uint32))


__all__ = ["HIT_DTYPES", "merge_hits", "weak_reads_and_flags"]
