"""Type stub of the private Cython module _mapq (wrapped by mapq.py)."""
from typing import Optional

import numpy as np
import numpy.typing as npt

def unseen_rival_scores(read_len: npt.NDArray[np.int64], covered: npt.NDArray[np.int64],
                        guarantee: npt.NDArray[np.int64], q: int, match: int, mismatch: int, extra_edits: int
                        ) -> tuple[Optional[npt.NDArray[np.int64]], int]: ...
def close_rivals(score: npt.NDArray[np.int64], sub: npt.NDArray[np.int64], n_sub: npt.NDArray[np.int64],
                 gap: int) -> npt.NDArray[np.uint8]: ...
def mapq_scores(score: npt.NDArray[np.int64], sub: npt.NDArray[np.int64], n_sub: npt.NDArray[np.int64],
                aligned_len: npt.NDArray[np.int64], unseen: npt.NDArray[np.int64], covered: npt.NDArray[np.int64],
                read_len: npt.NDArray[np.int64], ties: npt.NDArray[np.uint8], log_length: npt.NDArray[np.float64],
                log_count: npt.NDArray[np.float64], log_coef_len: float, coef_len: int, q: int, match: int,
                mismatch: int, mapq_max: int, crowd_min: int, crowd_cap: int, crowd_zero: int,
                close_identity: float, masked_share: float
                ) -> tuple[Optional[npt.NDArray[np.int32]], int, int]: ...
def pair_mapqs(q_se: npt.NDArray[np.int64], q_pe: npt.NDArray[np.int64], unseen_ties: npt.NDArray[np.uint8],
               close: npt.NDArray[np.uint8], boost: int) -> npt.NDArray[np.int64]: ...
