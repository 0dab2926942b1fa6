"""Type stub of the private Cython module _hit_lists (wrapped by hit_lists.py)."""
import numpy as np
import numpy.typing as npt

def is_sorted(rs: npt.NDArray[np.uint32]) -> bool: ...
def merge_sorted(a_rs: npt.NDArray[np.uint32], a_start: npt.NDArray[np.uint32], a_end: npt.NDArray[np.int64],
                 a_dist: npt.NDArray[np.int32], a_keep: npt.NDArray[np.uint8], b_rs: npt.NDArray[np.uint32],
                 b_start: npt.NDArray[np.uint32], b_end: npt.NDArray[np.int64], b_dist: npt.NDArray[np.int32]
                 ) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32], npt.NDArray[np.int64],
                            npt.NDArray[np.int32]]: ...
def weak_read_flags(n_reads: int, rs: npt.NDArray[np.uint32], dist: npt.NDArray[np.int32],
                    lengths: npt.NDArray[np.int64], max_errors: npt.NDArray[np.uint32]
                    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint8], npt.NDArray[np.bool_]]: ...
