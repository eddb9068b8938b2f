"""How the C library's malloc hands freed memory back to the kernel, set for batched evaluation.

PyTorch takes CPU tensors from the C library's `malloc` and caches none of them. A chunk of designs
(`analytical.evaluate`: 65,536 on a CPU) allocates and frees a few hundred MB of temporaries, and glibc's
defaults give much of it back to the kernel between one tensor and the next: the heap's free top is
trimmed above 128 KiB (M_TRIM_THRESHOLD), and blocks above the mmap threshold (128 KiB at the start, raised
as such blocks are freed) are mapped and unmapped each time (glibc manual, "Malloc Tunable Parameters";
mallopt(3)). Every page the next tensor touches is then a minor page fault, a page the kernel zeroes.

`retain_freed_memory` keeps that memory in the process: blocks below glibc's own ceiling for its dynamic
threshold come from the heap, and the heap keeps up to 1 GiB of free top. Measured with
experiments/benchmarks/bench_analytical.py against its `--glibc-defaults` (medians of six interleaved runs on
the 2-core machine, README Performance): 0.5 against 8,609 minor page faults an evaluate of a 65,536-design
chunk, 1.04e6 against 8.1e5 designs/s in such chunks. Peak resident memory is the same; the process keeps its peak
instead of falling back after each chunk. Results are unchanged (the same arithmetic on the same values).
The `deepflow` command and its workers call it; a Python caller of `analytical.evaluate` may.
"""

from __future__ import annotations

import ctypes
import functools
import platform

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h>
# glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit, 4 MiB x sizeof(long): the most its own dynamic threshold reaches
# (mallopt(3), M_MMAP_THRESHOLD); larger blocks are still mapped apart and unmapped when freed
MMAP_THRESHOLD_BYTES = 32 * 2 ** 20
# free heap top kept: more than a 65,536-design chunk's temporaries (bench_analytical's process peaks at ~0.5 GiB)
TRIM_THRESHOLD_BYTES = 2 ** 30


@functools.cache
def retain_freed_memory() -> bool:
    """Set glibc's mmap threshold to `MMAP_THRESHOLD_BYTES` and its trim threshold to `TRIM_THRESHOLD_BYTES`
    for this process (once). True where it did; False where the C library is not glibc (macOS, musl), which
    keeps its own policy."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the process's own C library
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    mapped_apart = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)  # mallopt answers 1 on success
    trimmed = mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    return mapped_apart == 1 and trimmed == 1
