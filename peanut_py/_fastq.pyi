"""Type stub of the private Cython module _fastq (the strict-FASTQ fast path of reads.py)."""
from typing import Optional

import numpy as np
import numpy.typing as npt

INCOMPLETE: int
ODD: int
FULL: int

class Block:
    text: npt.NDArray[np.uint8]
    size: int
    users: int
    def __init__(self, size: int) -> None: ...
    def refill(self) -> None: ...

class Chunk:
    buf: npt.NDArray[np.uint8]
    base: int
    n: int
    raw: bool
    name_pos: npt.NDArray[np.int64]
    name_cum: npt.NDArray[np.int64]
    seq_pos: npt.NDArray[np.int64]
    seq_cum: npt.NDArray[np.int64]
    rec_end: npt.NDArray[np.int64]
    def __init__(self, buf: npt.NDArray[np.uint8], base: int, name_pos: npt.ArrayLike, name_cum: npt.ArrayLike,
                 seq_pos: npt.ArrayLike, seq_cum: npt.ArrayLike, rec_end: npt.ArrayLike, raw: bool = False,
                 owner: Optional[Block] = None) -> None: ...
    def name(self, i: int) -> bytes: ...

def parse_block(block: Block, base: int, start: int, end: int) -> tuple[Optional[Chunk], int, int, int]: ...
def count_records(buf: npt.NDArray[np.uint8], start: int, end: int, max_records: int) -> tuple[int, int, int]: ...
def first_non_ascii(buf: npt.NDArray[np.uint8], start: int, end: int) -> int: ...
def unit_lengths(streams: list, per: int, units: int) -> npt.NDArray[np.int64]: ...
def gather(streams: list, strip: bool, with_quals: bool, with_codes: bool) -> tuple: ...
def first_mate_mismatch(stream1: list, stream2: Optional[list], strip: bool = True) -> int: ...
