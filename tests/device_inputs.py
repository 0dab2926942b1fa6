"""Device inputs built on the host for kernel tests: a read buffer in the shape of qgroup.ReadBuffer (the parts
validation and rescue read), without building a q-group index."""
from types import SimpleNamespace

import numpy as np
import pyopencl.array as cla

COMPLEMENT = np.array([3, 2, 1, 0, 4], dtype=np.uint8)


def read_buffer(queue, reads):
    """Each read forward then reverse complement; rs = 2 * read + strand."""
    strands = []
    for r in reads:
        r = np.asarray(r, dtype=np.uint8)
        strands += [r, COMPLEMENT[r[::-1]]]
    starts = np.zeros(len(strands) + 1, dtype=np.uint32)
    starts[1:] = np.cumsum([len(s) for s in strands])
    text = np.concatenate(strands) if strands else np.zeros(0, np.uint8)
    host = SimpleNamespace(strands=strands)
    dev = SimpleNamespace(
        text=cla.to_device(queue, text if len(text) else np.zeros(1, np.uint8)),
        rs_start=cla.to_device(queue, starts),
        n_reads=len(reads),
        n_rs=len(strands),
        max_len=max((len(r) for r in reads), default=0),
        rs_start_host=starts,
    )
    return dev, host
