"""Type stub of the private Cython module _pair_choice (wrapped by pair_choice.py)."""
import numpy as np
import numpy.typing as npt

def pair_score(score_a: int, score_b: int, insert: int, mean: float, std: float, match: int) -> int: ...
def choose_pairs(pair: npt.NDArray[np.int64], rank_a: npt.NDArray[np.int64], rank_b: npt.NDArray[np.int64],
                 score_a: npt.NDArray[np.int64], score_b: npt.NDArray[np.int64], insert: npt.NDArray[np.int64],
                 own: npt.NDArray[np.int64], mean: float, std: float, match: int, mismatch: int, gap_open: int,
                 gap_extend: int, pen_unpaired: int, q_max: int
                 ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_], npt.NDArray[np.int64]]: ...
