"""Type stub of the private Cython module _pair_items (wrapped by pair_items.py)."""
import numpy as np
import numpy.typing as npt

_I64 = npt.NDArray[np.int64]

def concordant_combinations(read: _I64, strand: _I64, start: _I64, end: _I64, contig: _I64, low: int, high: int
                            ) -> tuple[_I64, _I64, _I64]: ...
def pair_items(rs: npt.NDArray[np.uint32], start: npt.NDArray[np.uint32], end: _I64, order: _I64, ptr: _I64,
               report: npt.NDArray[np.int32], contig_offsets: _I64, has_insert: bool, low: int, high: int,
               first_read: int, max_pair_hits: int) -> tuple[npt.NDArray, ...]: ...
def combination_scores(kept: _I64, item_ptr: _I64, fwd_item: _I64, rev_item: _I64, fwd_read: _I64, fwd_rank: _I64,
                       rev_rank: _I64, insert: _I64, pos: _I64, score: npt.NDArray[np.int32]
                       ) -> tuple[_I64, _I64, _I64, _I64, _I64, _I64, _I64]: ...
def chosen_items(kept: _I64, n_align: _I64, report: npt.NDArray[np.int32], item_ptr: _I64, item_rank: _I64,
                 item_hit: _I64, item_strand: npt.NDArray[np.uint8], item_start: _I64, item_end: _I64, chosen: _I64,
                 paired: npt.NDArray[np.uint8], q_pe: _I64, pos: _I64, score: npt.NDArray[np.int32],
                 read_begin: npt.NDArray[np.int32], read_end: npt.NDArray[np.int32], contig: _I64,
                 dist: npt.NDArray[np.int32], order: _I64, ptr: _I64, unseen: _I64, has_insert: bool, low: int,
                 high: int) -> tuple[npt.NDArray, ...]: ...
def without_ties(mapq: npt.NDArray[np.int32] | _I64, tied: npt.NDArray[np.uint8]) -> _I64: ...
def raised_where(boost: npt.NDArray[np.uint8], raised: npt.NDArray[np.int32] | _I64, mapq: _I64) -> _I64: ...
