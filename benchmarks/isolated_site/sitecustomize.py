"""Run at start-up by every Python process of an isolated benchmark side: ``flowzoo`` (and
each top-level package the installed one maps) is imported from ``$FLOWZOO_BENCH_TREE`` only.

Why: an editable install puts a finder on ``sys.meta_path`` (setuptools) or a path in a
``.pth`` file that serves any ``flowzoo`` module the tree lacks from the installed checkout, so
an old commit's tree would run with today's modules mixed in (an ``ImportError`` when the
layout moved, a silent mix when it did not). ``site`` imports this module after the ``.pth``
files ran and before any user code; the side's own subprocesses (a verifier worker, a judge)
inherit ``PYTHONPATH`` and so run it too. A ``sitecustomize`` this one shadows is run after it.
"""

from __future__ import annotations

import importlib.machinery as _machinery
import os
import sys

_STANDARD = (_machinery.PathFinder, _machinery.BuiltinImporter, _machinery.FrozenImporter)
#: top-level names whose modules must come from the tree
PACKAGES = ("flowzoo", "flowzoo_vf")


def inside(path: str, tree: str) -> bool:
    """Whether ``path`` lies in ``tree`` (symlinks resolved)."""
    p, root = os.path.realpath(path), os.path.realpath(tree)
    return p == root or p.startswith(root + os.sep)


def _standard(finder: object) -> bool:
    cls = finder if isinstance(finder, type) else type(finder)
    return issubclass(cls, _STANDARD)


def _serves_flowzoo(finder: object) -> bool:
    try:
        return any(finder.find_spec(name, None) is not None for name in PACKAGES)  # type: ignore[attr-defined]
    except Exception:
        return False


def isolate(tree: str) -> None:
    """Put ``tree`` first on ``sys.path`` and drop every import hook that serves ``flowzoo``
    from elsewhere (a package's submodules then resolve only under the tree's package)."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [tree] + [
        p for p in sys.path if "__editable__" not in p and p and not inside(p, tree)
    ]
    if here not in sys.path:  # keep this module importable: children call foreign()
        sys.path.insert(1, here)
    sys.meta_path[:] = [f for f in sys.meta_path if _standard(f) or not _serves_flowzoo(f)]
    sys.path_importer_cache.clear()


def foreign(tree: str | None = None) -> list[str]:
    """Files of loaded ``flowzoo`` modules that are not in the tree (empty when isolated)."""
    tree = tree or os.environ["FLOWZOO_BENCH_TREE"]
    out = []
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if name.split(".")[0] in PACKAGES and f and not inside(f, tree):
            out.append(f"{name}: {f}")
    return sorted(out)


def _chain() -> None:
    """Run the ``sitecustomize`` this one shadows, if any (a distribution's or a user's)."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if p and os.path.realpath(p) != os.path.realpath(here)]
    spec = _machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None and spec.origin != __file__:
        mod = type(sys)("_shadowed_sitecustomize")
        spec.loader.exec_module(mod)  # type: ignore[union-attr]


if os.environ.get("FLOWZOO_BENCH_TREE"):
    isolate(os.environ["FLOWZOO_BENCH_TREE"])
_chain()
