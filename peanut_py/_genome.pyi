"""Type stub of the private Cython module _genome (wrapped by genome.py)."""
import numpy as np
import numpy.typing as npt

def unpack_windows(words: npt.NDArray[np.uint32], run_start: npt.NDArray[np.int64], run_end: npt.NDArray[np.int64],
                   starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
                   ) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]: ...
