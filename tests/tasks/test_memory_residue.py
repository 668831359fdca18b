"""A program that reads the hidden tests of the task it is judged on out of its own memory,
where an earlier run on the same fork-server left them (a replay's request, freed but not
zeroed, in the server every run is forked from): it must score 0. The hidden functions map
numbers to random values, so no program computes them; the cheat knows no task."""

import random

import pytest

from flowzoo.sandbox import get_sandbox
from flowzoo.tasks.base import Task
from flowzoo.tasks.code import CodeFamily

#: defines every function whose ``assert NAME(int) == int`` it finds in its memory
CHEAT = r"""```python
import re as _re


def _scan():
    pat = _re.compile(rb"assert ([A-Za-z_]\w*)\((-?\d+)\) == (-?\d+)")
    table = {}
    with open("/proc/self/maps") as m:
        maps = m.read().splitlines()
    mem = open("/proc/self/mem", "rb", buffering=0)
    for line in maps:
        p = line.split()
        if "r" not in p[1]:
            continue
        lo, hi = (int(x, 16) for x in p[0].split("-"))
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, OverflowError, ValueError):
            continue
        for m in pat.finditer(data):
            table.setdefault(m.group(1).decode(), {})[int(m.group(2))] = int(m.group(3))
    return table


for _name, _t in _scan().items():
    globals()[_name] = (lambda t: lambda x: t.get(x, 0))(_t)
```"""


@pytest.mark.parametrize("forkserver", [True, False])
def test_hidden_tests_left_in_memory_by_an_earlier_run_are_never_read(forkserver):
    rng = random.Random(7)
    fam = CodeFamily(sandbox=get_sandbox("process", timeout_s=10, workers=1, forkserver=forkserver))
    try:
        stolen = []
        for k in range(4):
            name = f"hidden_{k}"
            cases = [(rng.randrange(10**6), rng.randrange(10**9)) for _ in range(3)]
            tests = [f"assert {name}({a}) == {b}" for a, b in cases]
            task = Task(
                id=name,
                question="q",
                family="code",
                meta={"entry_point": name, "prompt_code": "", "setup": "", "tests": tests},
            )
            # an honest sample judged first (the task comes back: another step, an evaluation
            # sample), then a group of cheats, as GRPO scores them (distinct texts: no memo)
            fam.score_many(task, [f"```python\ndef {name}(x):\n    return x\n```"])
            texts = [
                CHEAT.replace("```python", f"```python\n# sample {j}\ndef {name}(x):\n    return 0")
                for j in range(4)
            ]
            stolen += [v.score for v in fam.score_many(task, texts) if v.score > 0]
        assert stolen == [], f"{len(stolen)} samples scored by reading hidden tests from memory"
    finally:
        fam.sandbox.close()
