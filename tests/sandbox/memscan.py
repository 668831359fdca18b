"""A program fragment (source text, sent into the sandbox) that scans the memory of the
process it runs in: what a hostile program does to find data an earlier run left behind.
One scanner for the carry-over tests' memory channels (tests/sandbox/test_carryover.py).
tests/tasks/test_memory_residue.py keeps its cheat whole: it is a program under test, and
rewritten on this scanner it no longer found the hidden tests on the old server."""

#: defines ``_fz_memory_matches(pattern)``: the groups of every match of the bytes regex
#: ``pattern`` in the process's readable mappings ([] where /proc/self/mem cannot be read)
MEMORY_SCAN = r"""
import re as _fz_re


def _fz_memory_matches(pattern):
    pat = _fz_re.compile(pattern)
    found = []
    try:
        maps = open("/proc/self/maps").read().splitlines()
        mem = open("/proc/self/mem", "rb", buffering=0)
    except OSError:
        return found
    for line in maps:
        f = line.split()
        if "r" not in f[1]:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        try:
            mem.seek(lo)
            found += [m.groups() for m in pat.finditer(mem.read(hi - lo))]
        except (OSError, OverflowError, ValueError):
            pass
    return found
"""
