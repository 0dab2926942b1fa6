"""Type stub of the private Cython module _sam_records (wrapped by sam_records.py)."""
from typing import Any, Optional, Sequence

import numpy as np
import numpy.typing as npt

FLAGS: dict[str, int]
COMPLEMENT_TABLE: bytes

def format_single_end(batch: Any, ref_names: Sequence[str], contig_offsets: npt.NDArray[np.int64], r0: int,
                      n_reads: int, report: npt.NDArray[np.int32], first: npt.NDArray[np.int64],
                      mapq: npt.NDArray[np.int64], sub: npt.NDArray[np.int64], strand: npt.ArrayLike,
                      contig: npt.ArrayLike, pos: npt.ArrayLike, nm: npt.ArrayLike, score: npt.ArrayLike,
                      cigar: npt.ArrayLike, cigar_off: npt.ArrayLike, md: npt.ArrayLike, md_off: npt.ArrayLike,
                      secondary: bool, read_group_id: Optional[str] = None) -> tuple[bytes, int, int]: ...
def format_pairs(batch: Any, ref_names: Sequence[str], contig_offsets: npt.NDArray[np.int64], r0: int, n_reads: int,
                 prim: npt.NDArray[np.int64], mapped: npt.NDArray[np.uint8], mapq: npt.NDArray[np.int64],
                 sub: npt.NDArray[np.int64], rep_ptr: npt.NDArray[np.int64], rep_item: npt.NDArray[np.int64],
                 proper: npt.NDArray[np.uint8], strand: npt.ArrayLike, contig: npt.ArrayLike, pos: npt.ArrayLike,
                 ref_end: npt.ArrayLike, nm: npt.ArrayLike, score: npt.ArrayLike, cigar: npt.ArrayLike,
                 cigar_off: npt.ArrayLike, md: npt.ArrayLike, md_off: npt.ArrayLike, secondary: bool,
                 read_group_id: Optional[str] = None) -> tuple[bytes, int, int, int, int]: ...
def pair_flags(first: bool, mapped: bool, mate_mapped: bool, reverse: bool, mate_reverse: bool, proper: bool) -> int: ...
def template_length_a(pos_a: int, end_a: int, pos_b: int, end_b: int) -> int: ...
