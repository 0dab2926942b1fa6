"""Type stub of the private Cython module _masked (used by mapq.MaskedQgrams)."""
import numpy as np
import numpy.typing as npt

def masked_coverage(codes: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], table: npt.NDArray[np.uint64],
                    values: npt.NDArray[np.uint64], slots: npt.NDArray[np.int32], q: int, hash_bits: int,
                    reverse: bool = True) -> npt.NDArray[np.int64]: ...

def value_slots(values: npt.NDArray[np.uint64], slot_bits: int) -> npt.NDArray[np.int32]: ...
