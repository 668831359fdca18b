"""The suite's dependencies are constrained (``constraints.txt``, used with ``pip install -c``
by ``.ci/run`` and the README's test command), so that a fresh install months later resolves
to the versions the suite passed on, not to whatever was released since.

The file pins every distribution that ``flowzoo`` and all its extras pull in (the whole
installed closure, read from the installed packages' own metadata), ``name==version`` (the
public version: a local build label such as torch's ``+cpu`` is left out, so the pin holds for
the CPU and CUDA wheels alike). These
tests keep it honest: it names every requirement of ``setup.cfg`` (base and every extra), each
pin satisfies that requirement's own range, it covers the installed closure, and what is
installed is what it pins. Regenerate after changing a dependency (in the environment the
suite passed in)::

    python -m tests.test_constraints > constraints.txt
"""

from __future__ import annotations

import configparser
import importlib.metadata as md
import re
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


def canon(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def setup_requirements() -> dict[str, list[Requirement]]:
    """``setup.cfg``'s requirements: ``""`` for ``install_requires``, then one per extra."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")

    def reqs(text: str) -> list[Requirement]:
        lines = (ln.split("#", 1)[0].strip() for ln in text.splitlines())
        return [Requirement(ln) for ln in lines if ln]

    out = {"": reqs(cfg["options"]["install_requires"])}
    for extra, text in cfg["options.extras_require"].items():
        out[extra] = reqs(text)
    return out


def _applies(req: Requirement, extras: set[str]) -> bool:
    """Whether ``req`` holds here, for a distribution asked for with ``extras``."""
    if req.marker is None:
        return True
    return any(req.marker.evaluate({"extra": e}) for e in extras | {""})


def installed_closure() -> tuple[dict[str, str], list[str]]:
    """{name: installed version} of everything flowzoo and all its extras pull in, read from
    the installed packages' metadata (markers evaluated for this interpreter and platform),
    and the requirements that are not installed."""
    todo: list[tuple[Requirement, set[str]]] = []
    for extra, reqs in setup_requirements().items():
        todo += [(r, set(r.extras)) for r in reqs if _applies(r, {extra} if extra else set())]
    seen: dict[str, set[str]] = {}
    pins: dict[str, str] = {}
    missing: list[str] = []
    while todo:
        req, extras = todo.pop()
        name = canon(req.name)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            missing.append(str(req))
            continue
        pins[name] = Version(dist.version).public  # 2.13.0+cpu pins 2.13.0: any build
        for text in dist.requires or []:
            sub = Requirement(text)
            if _applies(sub, seen[name]):
                todo.append((sub, set(sub.extras)))
    return dict(sorted(pins.items())), sorted(set(missing))


def read_constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    for n, line in enumerate(CONSTRAINTS.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = PIN.match(line)
        assert m, f"constraints.txt:{n}: {line!r} is not name==version"
        assert canon(m.group(1)) not in pins, f"constraints.txt:{n}: {m.group(1)} twice"
        pins[canon(m.group(1))] = m.group(2)
    return pins


def test_every_requirement_of_every_extra_is_constrained_within_its_range():
    pins = read_constraints()
    for extra, reqs in setup_requirements().items():
        for req in reqs:
            where = f"setup.cfg {'install_requires' if not extra else f'[{extra}]'}: {req}"
            name = canon(req.name)
            if not _applies(req, {extra} if extra else set()):
                continue  # e.g. tomli on Python < 3.11 only
            assert name in pins, f"{where} is not in constraints.txt (regenerate it)"
            assert req.specifier.contains(Version(pins[name]), prereleases=True), (
                f"{where}: constraints.txt pins {pins[name]}, outside the range"
            )


def test_the_constraints_cover_what_the_extras_pull_in_and_match_what_is_installed():
    if canon("flowzoo") in read_constraints():
        pytest.fail("constraints.txt pins flowzoo itself (the project is never constrained)")
    closure, missing = installed_closure()
    if missing:
        pytest.skip(
            f"not every extra is installed ({', '.join(missing[:5])}...): install with the "
            "README's test command to check the installed versions"
        )
    pins = read_constraints()
    unpinned = sorted(set(closure) - set(pins))
    assert not unpinned, f"pulled in but not in constraints.txt (regenerate it): {unpinned}"
    stale = {n: (closure[n], pins[n]) for n in closure if closure[n] != pins[n]}
    assert not stale, f"installed vs constraints.txt: {stale}"
    extra_pins = sorted(set(pins) - set(closure))
    assert not extra_pins, f"constraints.txt pins what nothing pulls in: {extra_pins}"


def test_ci_installs_under_the_constraints():
    lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if "pip install" in ln]
    assert lines, ".ci/run installs nothing with pip"
    for line in lines:
        assert "-c constraints.txt" in line, f".ci/run installs without the constraints: {line}"


def main() -> None:
    """Print a constraints file for the installed closure (see the module doc)."""
    closure, missing = installed_closure()
    if missing:
        sys.exit(f"install every extra first; missing: {', '.join(missing)}")
    print(
        "# Versions the test suite passed on: every distribution flowzoo and all its extras\n"
        f"# pull in (Python {sys.version_info.major}.{sys.version_info.minor}, {sys.platform}). "
        "Used as `pip install -c constraints.txt ...`\n"
        "# (.ci/run, the README's test command). Regenerate after a dependency change, in the\n"
        "# environment the suite passed in: python -m tests.test_constraints > constraints.txt"
    )
    for name, version in closure.items():
        print(f"{name}=={version}")


if __name__ == "__main__":
    main()
