"""deepflow.allocator: on glibc, a freed tensor's memory stays in the process after `retain_freed_memory`, which
the `deepflow` command calls before it runs anything."""

from __future__ import annotations

import platform
import subprocess
import sys
import textwrap

import pytest

from deepflow import allocator, cli

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
BLOCK_BYTES = 16 * 2 ** 20  # above glibc's starting mmap threshold (128 KiB), below the one the module sets
assert BLOCK_BYTES < allocator.MMAP_THRESHOLD_BYTES

# a fresh process: one tensor of BLOCK_BYTES allocated and freed, then the free bytes glibc's heap holds
# (mallinfo2, glibc >= 2.33)
PROBE = textwrap.dedent(f"""
    import ctypes, sys
    import torch
    from deepflow import allocator

    retained = allocator.retain_freed_memory() if sys.argv[1] == "retain" else False

    class MallInfo2(ctypes.Structure):
        _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]

    mallinfo2 = ctypes.CDLL(None).mallinfo2
    mallinfo2.restype = MallInfo2
    block = torch.ones({BLOCK_BYTES} // 8, dtype=torch.float64)
    del block
    print(retained, mallinfo2().fordblks)
""")


def _after_a_freed_block(mode: str) -> tuple[bool, int]:
    """`(retain_freed_memory's answer, free bytes in the heap)` of a fresh process after the block is freed."""
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    retained, free = out.stdout.split()
    return retained == "True", int(free)


@pytest.mark.skipif(not GLIBC, reason="the thresholds are glibc's (mallopt); another C library keeps its own policy")
def test_a_freed_block_stays_in_the_heap_once_freed_memory_is_retained():
    retained, free = _after_a_freed_block("retain")
    assert retained
    assert free >= BLOCK_BYTES
    # glibc as it starts maps such a block apart from the heap and unmaps it when it is freed
    _, free_by_default = _after_a_freed_block("default")
    assert free_by_default < BLOCK_BYTES


def test_the_deepflow_command_retains_freed_memory_before_it_runs(capsys):
    allocator.retain_freed_memory.cache_clear()
    assert cli.main(["evaluate", "output=json"]) == 0
    assert allocator.retain_freed_memory.cache_info().currsize == 1
    assert '"feasible": true' in capsys.readouterr().out
