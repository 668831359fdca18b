"""The package's rooms and the direction of their dependencies (DESIGN.md, "Layout"): the
environment side, the analysis and the config never import the training side or torch, and
the models never import the training loop. Read from the source (every import statement,
nested ones included), so a lazy import inside a function counts too."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "flowzoo"
HEAVY = ("torch", "transformers", "peft", "vllm")
TRAINING = ("flowzoo.agents", "flowzoo.integrations", "flowzoo.cli")

#: room -> the imports it may never make
FORBIDDEN = {
    "envs": TRAINING + HEAVY,
    "tasks": TRAINING + HEAVY + ("flowzoo.envs",),
    "sandbox": TRAINING + HEAVY + ("flowzoo.envs", "flowzoo.tasks"),
    "analysis": TRAINING + HEAVY,
    "config.py": TRAINING + HEAVY,
    "agents/models": ("flowzoo.agents.train", "flowzoo.integrations", "flowzoo.cli"),
    "agents/train": ("flowzoo.integrations", "flowzoo.cli"),
}


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, at any depth of its code."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
    return out


def _hits(imported: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in imported for b in banned if m == b or m.startswith(b + "."))


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_dependencies_point_one_way(room):
    files = [PKG / room] if room.endswith(".py") else sorted((PKG / room).rglob("*.py"))
    assert files
    bad = {
        str(f.relative_to(PKG)): h for f in files if (h := _hits(imports_of(f), FORBIDDEN[room]))
    }
    assert not bad, f"{room} imports what it must not: {bad}"


def test_the_scan_sees_a_back_arrow(tmp_path):
    """The rule can fail: a lazy import of the training side inside a function is found."""
    f = tmp_path / "m.py"
    f.write_text(
        "def g():\n    from flowzoo.agents.models.players import partners\n    import torch\n"
    )
    hits = _hits(imports_of(f), FORBIDDEN["envs"])
    assert {"flowzoo.agents.models.players", "torch"} <= set(hits)
    assert _hits(imports_of(f), FORBIDDEN["agents/train"]) == []


def test_environment_side_imports_without_torch():
    """Importing the env side, the analysis and the config loads no torch (a user without
    the ``[agents]`` extra can use them)."""
    code = (
        "import sys, flowzoo, flowzoo.config, flowzoo.envs.wrappers, flowzoo.analysis.report\n"
        "e = flowzoo.make_env('voting-math'); e.reset(seed=0)\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
