"""Memory layout limits and the device memory budget: how large a read buffer and its q-group index may be.

The stages that allocate (the read buffer and q-group index, filtration, the resident reference) take their
limits from here, so that a buffer sized by :func:`reads_per_buffer` fits what they allocate.
"""
from .errors import PeanutError

MAX_READ_LENGTH = 1024
W = 32  # bits per word of I (the paper's w)
GROUP_BLOCK = 1024  # groups (words of I) per block of the S computation; a multiple of S_STRIDE
# Groups per stored entry of a sampled S (the paper's 2; up to 16, the words of I in one 64-byte line).  A
# larger stride shrinks S (q = 16: 256 MiB at 2, 32 MiB at 16) but adds popcounts to every lookup; see
# docs/core.md for why 2 stays the default.
S_STRIDE = 2
# Text positions index pyopencl scans and RadixSorts whose index type is int32.
MAX_TEXT = (1 << 31) - 1
# Bases folded out of the q-group key on a CPU device: there I and S are fresh host memory that every run
# first touches (q = 16: 768 MiB unfolded, 192 MiB folded) and that every buffer clears and scans.  A GPU
# fills and scans 768 MiB in well under a millisecond, so it keeps the paper's unfolded index and saves the
# search inside a key's slot.
CPU_FOLD = 1


def default_fold(device):
    """Bases folded out of the q-group index's key on ``device`` (see CPU_FOLD)."""
    return CPU_FOLD if getattr(device, "host_memory", False) else 0


def index_fixed_bytes(q, sample_s=True, fold=0):
    """Device bytes of a q-group index that depend on q only, at the peak of its build: I (4^(q - fold) / 8
    bytes), S (1/S_STRIDE or all of that again) and the block counts and starts of the S computation (8 bytes
    per block)."""
    i_bytes = 4 ** (q - fold) // 8
    s_bytes = i_bytes // S_STRIDE if sample_s else i_bytes
    blocks = -(-(i_bytes // 4) // GROUP_BLOCK) + 1
    return i_bytes + s_bytes + 8 * blocks


# Device bytes per read base while a buffer is built (see docs/core.md, "buffer sizing"): codes 1, text 2,
# pos_rs 8, O 8, the q-gram value (later slot) of every text position 8 and its valid flag 2, and per
# distinct q-gram (at most one per text position, 2 per base) 4 bytes each of counts, S', the fill cursor
# and the S' scan's scratch: 32.  (Folded, O's bases take 2 per base, but only after the valid flags are
# freed.)
BUILD_BYTES_PER_BASE = 61
READ_SHARE = 0.5  # of the memory left after the reference and I + S; the rest is for hits and validation
USABLE = 0.75  # of global memory: drivers, fragmentation and the pool's slack take the rest


def reads_per_buffer(device, mean_read_length, q=16, sample_s=True, reserved_bytes=0, max_reads=None, fold=None):
    """How many reads of ``mean_read_length`` one buffer should hold on ``device``.

    ``reserved_bytes`` is what is already resident (``ResidentReference.device_bytes``).  The caller may cap
    the result with ``max_reads``.  Raises PeanutError when not even one read fits.
    """
    mean = max(1.0, float(mean_read_length))
    fold = default_fold(device) if fold is None else fold
    free = USABLE * device.global_mem - reserved_bytes - index_fixed_bytes(q, sample_s, fold)
    per_read = BUILD_BYTES_PER_BASE * mean + 8
    n = int(READ_SHARE * free // per_read)
    # Single allocations (pos_rs, O: 8 bytes per read base) and the int32 index of the scans.
    n = min(n, int(device.max_alloc // (8 * mean)), int(MAX_TEXT // (2 * mean)))
    if max_reads is not None:
        n = min(n, int(max_reads))
    if n < 1:
        raise PeanutError(
            f"device {device.name} has too little memory for q={q} with {reserved_bytes / 2**20:.0f} MiB of "
            "reference resident; use a smaller q"
        )
    return n
