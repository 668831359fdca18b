"""The package's rooms and the direction of their dependencies (docs/architecture.md): the
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
TRAINING = ("flowzoo.agents", "flowzoo.tiny", "flowzoo.integrations", "flowzoo.cli")

#: room -> the imports it may never make
FORBIDDEN = {
    "envs": TRAINING + HEAVY,
    "tasks": TRAINING + HEAVY + ("flowzoo.envs",),
    "sandbox": TRAINING + HEAVY + ("flowzoo.envs", "flowzoo.tasks"),
    "analysis": TRAINING + HEAVY,
    "config": TRAINING + HEAVY,
    "agents/models": (
        "flowzoo.agents.train",
        "flowzoo.agents.sweeps",
        "flowzoo.integrations",
        "flowzoo.cli",
    ),
    # the tiny-model factory builds from the envs and the models' side, never from training
    "tiny": (
        "flowzoo.agents.train",
        "flowzoo.agents.sweeps",
        "flowzoo.integrations",
        "flowzoo.cli",
    ),
    "agents/train": ("flowzoo.integrations", "flowzoo.cli", "flowzoo.agents.sweeps"),
    # run-keeping knows nothing of learning; sweeps sit above training
    "agents/runs": (
        "flowzoo.agents.train",
        "flowzoo.agents.sweeps",
        "flowzoo.agents.models",
        "flowzoo.tiny",
        "flowzoo.integrations",
        "flowzoo.cli",
    ),
    "agents/sweeps": ("flowzoo.integrations", "flowzoo.cli"),
}


def import_statements(path: Path, here: str | None = None):
    """(module, names taken from it or None, line) for every import statement of a file, at
    any depth of its code; relative imports resolved against the package ``here`` (skipped
    when it is None: a file outside a package)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                if here is None:
                    continue
                up = here.split(".")[: len(here.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            yield base, [a.name for a in node.names], node.lineno


def _package_of(path: Path) -> str | None:
    """The package a file of flowzoo belongs to (a package's ``__init__``: itself)."""
    try:
        return ".".join(path.resolve().relative_to(PKG.parent).parts[:-1])
    except ValueError:
        return None


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, at any depth of its code (relative imports resolved)."""
    out: set[str] = set()
    for module, names, _ in import_statements(path, _package_of(path)):
        out.add(module)
        out.update(f"{module}.{n}" for n in names or ())
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
    # a relative import is resolved against the file's package, so it cannot slip past
    f.write_text("from ..agents.train import trainer\n")
    mods = {m for m, _, _ in import_statements(f, "flowzoo.envs")}
    assert _hits(mods, FORBIDDEN["envs"]) == ["flowzoo.agents.train"]


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


# ----------------------------------------------------------------------------- import cycles


def import_graph(pkg: Path) -> dict[str, dict[str, int]]:
    """Module -> {module of the same package it imports: line}, every import at any depth,
    relative ones resolved. ``from P import n`` points at ``P.n`` when that is a module, else
    at ``P``; the parent packages Python runs on the way are not edges (else every package
    whose ``__init__`` re-exports a submodule would be a cycle)."""
    files = {}
    for p in pkg.rglob("*.py"):
        parts = p.relative_to(pkg.parent).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, dict[str, int]] = {m: {} for m in files}
    for mod, path in files.items():
        here = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for base, names, line in import_statements(path, here):
            targets = [base] if names is None else [
                f"{base}.{n}" if f"{base}.{n}" in files else base for n in names
            ]  # fmt: skip
            for t in targets:
                while t and t not in files:  # `import a.b.c` of a name in a.b: a.b
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].setdefault(t, line)
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): every cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _described(graph: dict[str, dict[str, int]], comp: list[str]) -> list[str]:
    return [f"{a} -> {b} (line {n})" for a in comp for b, n in graph[a].items() if b in comp]


def test_no_import_cycles_in_the_package():
    """No module of the package is in an import cycle (type-checking-only and lazy imports
    included): each piece lives in the module that owns it, so any module can be read and
    imported on its own."""
    graph = import_graph(PKG)
    assert any(m.startswith("flowzoo.agents.") for m in graph)
    bad = [_described(graph, c) for c in import_cycles(graph)]
    assert not bad, f"import cycles: {bad}"


def test_the_cycle_scan_finds_a_planted_cycle(tmp_path):
    """The rule can fail: a cycle closed by a relative import and a lazy absolute one inside a
    function is found; a package re-exporting its submodules is not a cycle."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub import a\n")
    (pkg / "sub" / "__init__.py").write_text("from . import a, b\n")
    (pkg / "sub" / "a.py").write_text("from .b import f\nfrom .. import c\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    import pkg.c\n")
    (pkg / "c.py").write_text("def g():\n    if True:\n        from pkg.sub.a import f\n")
    graph = import_graph(pkg)
    assert import_cycles(graph) == [["pkg.c", "pkg.sub.a", "pkg.sub.b"]]
    (pkg / "c.py").write_text("X = 1\n")
    assert import_cycles(import_graph(pkg)) == []


def _train_modules(path: Path) -> set[str]:
    """The flowzoo.agents.train modules (or names from them) a file imports."""
    return {m for m in imports_of(path) if m.startswith("flowzoo.agents.train.")}


def test_grpo_update_reads_three_files():
    """One GRPO update is learner.py + algorithms/grpo.py + losses.py (docs/architecture.md):
    what GRPO is may lean only on the loss pieces, the interface's types and the Batch type
    (its input), and the loss pieces on nothing of the training side but type names."""
    train = PKG / "agents" / "train"
    grpo = _train_modules(train / "algorithms" / "grpo.py")
    allowed = {
        "flowzoo.agents.train.losses",
        "flowzoo.agents.train.losses.Advantages",
        "flowzoo.agents.train.algorithms.base",
        "flowzoo.agents.train.algorithms.base.Algorithm",
        "flowzoo.agents.train.algorithms.base.Critic",
        "flowzoo.agents.train.batch",
        "flowzoo.agents.train.batch.Batch",
    }
    assert grpo - allowed == set(), sorted(grpo - allowed)
    losses = _train_modules(train / "losses.py")
    assert losses <= {
        "flowzoo.agents.train.batch",
        "flowzoo.agents.train.batch.Batch",
        "flowzoo.agents.train.rollout",
        "flowzoo.agents.train.rollout.TurnRecord",
    }, sorted(losses)
    # the learner reads the algorithm through its interface only
    learner = _train_modules(train / "learner.py")
    assert not any(m.startswith("flowzoo.agents.train.algorithms.grpo") for m in learner)


def test_the_models_reach_the_tiny_factory_only_inside_a_function():
    """A model name is resolved through the factory lazily: importing the models' side never
    imports ``flowzoo.tiny`` (which imports the envs to make its corpus)."""
    bad = []
    for f in sorted((PKG / "agents" / "models").rglob("*.py")):
        for node in ast.parse(f.read_text()).body:  # module level only
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flowzoo.tiny"):
                bad.append(f"{f.relative_to(PKG)}:{node.lineno}")
            if isinstance(node, ast.Import) and any(
                a.name.startswith("flowzoo.tiny") for a in node.names
            ):
                bad.append(f"{f.relative_to(PKG)}:{node.lineno}")
    assert not bad, f"module-level imports of flowzoo.tiny in agents/models: {bad}"


def test_the_domain_module_imports_nothing_of_the_package():
    """flowzoo/domain.py is below both the envs and the config (each checks its values with
    it): an import of the package from it would close a cycle through the config."""
    mods = imports_of(PKG / "domain.py")
    assert _hits(mods, ("flowzoo",)) == [], mods
