"""How the CLI renders its help: the docstrings and config help are written for the docs
(reStructuredText), a terminal shows their bare text; flags are never abbreviated."""

from __future__ import annotations

import argparse
import re

#: reStructuredText markup of docstrings and config help: ``literal``, :role:`target`
_RST = re.compile(r":[a-z]+:`~?([^`]+)`|``([^`]+)``")


def plain(text: str) -> str:
    """Help text as a terminal shows it: RST literals and roles (written for the docs) as
    their bare text."""
    return _RST.sub(lambda m: m.group(1) or m.group(2), text)


class Formatter(argparse.HelpFormatter):
    """Every description and flag help goes through :func:`plain` here, the one place help
    is rendered, whoever wrote it (a docstring, a ``TrainConfig`` field's metadata)."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain(super()._expand_help(action))


class Parser(argparse.ArgumentParser):
    """No abbreviated flags: ``--step 3`` is an error, not ``--steps 3``, so a new flag can
    never silently change what an old command line meant; help without RST markup.
    Subcommands inherit the class."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        kwargs.setdefault("formatter_class", Formatter)
        super().__init__(*args, **kwargs)
