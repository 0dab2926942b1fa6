"""Type stub of the private Cython module _single_end (wrapped by postprocess.py)."""
import numpy as np
import numpy.typing as npt

def reported_hits(order: npt.NDArray[np.int64], ptr: npt.NDArray[np.int64], report: npt.NDArray[np.int32],
                  rs: npt.NDArray[np.uint32], start: npt.NDArray[np.uint32], end: npt.NDArray[np.uint32],
                  first_read: int
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_],
                             npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
def next_stratum_sizes(order: npt.NDArray[np.int64], ptr: npt.NDArray[np.int64], dist: npt.NDArray[np.int32],
                       n_best: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]: ...
def read_summary(n_align: npt.NDArray[np.int64], report: npt.NDArray[np.int32], n_best: npt.NDArray[np.int32],
                 order: npt.NDArray[np.int64], ptr: npt.NDArray[np.int64], dist: npt.NDArray[np.int32],
                 pos: npt.NDArray[np.int64], score: npt.NDArray[np.int32], read_begin: npt.NDArray[np.int32],
                 read_end: npt.NDArray[np.int32], close_gap: int
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
                            npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.bool_]]: ...
