"""Type stub of the private Cython module _stream_pack (wrapped by resident.py)."""
import numpy as np
import numpy.typing as npt

def touched_positions(starts: npt.NDArray[np.uint32] | npt.NDArray[np.uint64], touched: npt.NDArray[np.uint32] | None,
                      b0: int, b1: int) -> int: ...
def pack_touched(starts: npt.NDArray[np.uint32] | npt.NDArray[np.uint64], positions: npt.NDArray[np.uint32] | None,
                 touched: npt.NDArray[np.uint32] | None, b0: int, b1: int, origin: int,
                 out_starts: npt.NDArray[np.uint32], out_positions: npt.NDArray[np.uint32] | None, at: int) -> int: ...
