"""Type stub of the private Cython module _bgzf (used by bgzf.py)."""
from typing import Sequence, Union

_Bytes = Union[bytes, bytearray, memoryview]

def crc32(data: _Bytes) -> int: ...
def frame_blocks(blocks: Sequence[_Bytes], bodies: Sequence[bytes]) -> bytes: ...
