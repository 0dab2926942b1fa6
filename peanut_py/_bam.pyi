"""Type stub of the private Cython module _bam (used by sam.py's BAM writer)."""
from typing import Iterable, Union

class RefNames:
    def __init__(self, names: Iterable[Union[str, bytes]]) -> None: ...

def sam_to_bam(text: bytes, refs: RefNames) -> bytes: ...
