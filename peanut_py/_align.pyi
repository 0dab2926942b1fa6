"""Type stub of the private Cython module _align (wrapped by align.py)."""
from typing import NamedTuple, Optional

import numpy as np
import numpy.typing as npt

MAX_LENGTH: int
MAX_PENALTY: int

class Alignment(NamedTuple):
    pos: int
    ref_end: int
    read_begin: int
    read_end: int
    score: int
    nm: int
    cigar: npt.NDArray[np.uint32]
    cigar_string: str
    md: str

class BatchAlignments(NamedTuple):
    pos: npt.NDArray[np.int64]
    ref_end: npt.NDArray[np.int64]
    read_begin: npt.NDArray[np.int32]
    read_end: npt.NDArray[np.int32]
    score: npt.NDArray[np.int32]
    nm: npt.NDArray[np.int32]
    cigar: npt.NDArray[np.uint32]
    cigar_offsets: npt.NDArray[np.int64]

def cigar_string(cigar: npt.ArrayLike) -> str: ...
def cigar_tuples(cigar: npt.ArrayLike) -> list[tuple[int, int]]: ...
def align(read_codes: npt.ArrayLike, ref_codes: npt.ArrayLike, ref_global_start: int, band_lo: int, band_hi: int,
          local: bool, A: int = 1, B: int = 4, O: int = 6, E: int = 1, *, ambig: int = 1, clip: int = 5,
          shortcut: bool = True) -> Alignment: ...
def ungapped_shortcut(read_codes: npt.ArrayLike, ref_codes: npt.ArrayLike, band_lo: int, band_hi: int, local: bool,
                      A: int = 1, B: int = 4, O: int = 6, E: int = 1, *, ambig: int = 1,
                      clip: int = 5) -> Optional[tuple[int, int, int]]: ...
def batch_arrays(read_seq: npt.ArrayLike, read_offsets: npt.ArrayLike, ref_seq: npt.ArrayLike,
                 ref_offsets: npt.ArrayLike, ref_global_start: npt.ArrayLike, band_lo: npt.ArrayLike,
                 band_hi: npt.ArrayLike, local: npt.ArrayLike) -> tuple[np.ndarray, ...]: ...
def align_batch(read_seq: npt.ArrayLike, read_offsets: npt.ArrayLike, ref_seq: npt.ArrayLike,
                ref_offsets: npt.ArrayLike, ref_global_start: npt.ArrayLike, band_lo: npt.ArrayLike,
                band_hi: npt.ArrayLike, local: npt.ArrayLike, A: int = 1, B: int = 4, O: int = 6, E: int = 1, *,
                ambig: int = 1, clip: int = 5, shortcut: bool = True) -> BatchAlignments: ...
def md_batch(read_seq: npt.ArrayLike, read_offsets: npt.ArrayLike, ref_seq: npt.ArrayLike,
             ref_offsets: npt.ArrayLike, ref_global_start: npt.ArrayLike, result: BatchAlignments) -> list[str]: ...
def md_flat(read_seq: npt.ArrayLike, read_offsets: npt.ArrayLike, ref_seq: npt.ArrayLike, ref_offsets: npt.ArrayLike,
            ref_global_start: npt.ArrayLike,
            result: BatchAlignments) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]: ...
def clip_terminal_gaps(read_seq: npt.ArrayLike, read_offsets: npt.ArrayLike, ref_seq: npt.ArrayLike,
                       ref_offsets: npt.ArrayLike, ref_global_start: npt.ArrayLike, result: BatchAlignments,
                       local: npt.ArrayLike, A: int = 1, B: int = 4, O: int = 6, E: int = 1, *, ambig: int = 1,
                       clip: int = 5) -> BatchAlignments: ...
def alignments_with_md(read_seq: npt.NDArray[np.uint8], read_offsets: npt.NDArray[np.int64],
                       ref_seq: npt.NDArray[np.uint8], ref_offsets: npt.NDArray[np.int64],
                       ref_global_start: npt.NDArray[np.int64], result: BatchAlignments, local: bool, A: int = 1,
                       B: int = 4, O: int = 6, E: int = 1, *, ambig: int = 1, clip: int = 5
                       ) -> tuple[BatchAlignments, tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]]: ...
