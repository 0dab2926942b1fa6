"""Type stub of the private Cython module _hit_windows (wrapped by postprocess.py)."""
import numpy as np
import numpy.typing as npt

def hit_windows(hit_start: npt.NDArray[np.int64], hit_end: npt.NDArray[np.int64], read_off: npt.NDArray[np.int64],
                contig_start: npt.NDArray[np.int64], contig_end: npt.NDArray[np.int64], window_pad: int,
                band_pad: int
                ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64],
                           npt.NDArray[np.int32], npt.NDArray[np.int32]]: ...
