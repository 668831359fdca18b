"""The README's Python snippets run as written (in a scratch directory: they write runs/)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), re.DOTALL)


def test_the_readme_has_snippets():
    assert len(SNIPPETS) >= 2


@pytest.mark.parametrize("i", range(len(SNIPPETS)))
def test_readme_snippet_runs(i, tmp_path, monkeypatch):
    if re.search(r"flowzoo\.(train|models|integrations)", SNIPPETS[i]):
        pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    exec(compile(SNIPPETS[i], f"README.md snippet {i}", "exec"), {"__name__": "__readme__"})
