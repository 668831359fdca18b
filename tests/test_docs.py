"""Every Python block in the README and docs/ runs as written (in a scratch directory: they
write runs/). A block that needs something the tests cannot start (a remote gateway) says so
in an HTML comment just before it, ``<!-- not-run: reason -->``, naming its tested twin."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"(<!--\s*not-run:(?P<why>[^>]*)-->\s*\n)?```python\n(?P<code>.*?)```", re.S)


def _blocks() -> list[tuple[str, str, str | None]]:
    out = []
    for page in PAGES:
        text = page.read_text()
        for m in BLOCK.finditer(text):
            line = text[: m.start("code")].count("\n")
            why = m.group("why").strip() if m.group("why") is not None else None
            out.append((f"{page.relative_to(ROOT)}:{line}", m.group("code"), why))
    return out


BLOCKS = _blocks()


def test_the_pages_have_blocks_and_most_run():
    assert len(BLOCKS) >= 8
    assert sum(why is None for _, _, why in BLOCKS) >= len(BLOCKS) - 2


@pytest.mark.parametrize("where,code,why", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_doc_block_runs_as_written(where, code, why, tmp_path, monkeypatch):
    if why is not None:
        assert len(why) > 20, f"{where}: a not-run block must say why and name its tested twin"
        pytest.skip(f"not run ({why})")
    for mod in sorted(set(re.findall(r"^\s*(?:from|import) ([A-Za-z_]\w*)", code, re.M))):
        if mod != "flowzoo" and importlib.util.find_spec(mod) is None:
            pytest.skip(f"{where} needs {mod}, which is not installed")
    if re.search(r"flowzoo\.(train|models|integrations)", code):
        pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    exec(compile(code, where, "exec"), {"__name__": "__doc_block__"})
