"""Reading a TOML or YAML config file into a plain table, refusing what would be read wrong.

Why strict: a config file decides a run. YAML silently keeps the last of two duplicate keys
(``lr`` given twice: one is ignored without a word) and its aliases let a few hundred bytes
expand into a config of gigabytes; both are refused here, with the file and line named. TOML
already refuses duplicate keys. A file larger than ``MAX_CONFIG_BYTES`` is refused unread.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

#: the largest config file read (a real one is a few kilobytes)
MAX_CONFIG_BYTES = 1 << 20


def _strict_yaml_loader():
    """A ``yaml.SafeLoader`` that refuses duplicate keys and aliases (``*name``)."""
    import yaml

    class StrictLoader(yaml.SafeLoader):
        def compose_node(self, parent, index):  # noqa: ANN001 - PyYAML's signature
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None,
                    None,
                    "aliases (*name) are not allowed in a flowzoo config; write the value out",
                    mark,
                )
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):  # noqa: ANN001
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    dup = key in seen
                except TypeError:  # an unhashable key: the base class says so
                    dup = False
                if dup:
                    raise yaml.constructor.ConstructorError(
                        "while reading a table",
                        seen[key],
                        f"duplicate key {key!r} (first given above); keep one",
                        key_node.start_mark,
                    )
                if not dup:
                    try:
                        seen[key] = key_node.start_mark
                    except TypeError:
                        pass
            return super().construct_mapping(node, deep=deep)

    return StrictLoader


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The table in a TOML or YAML file (training configs and sweep files alike)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"config file not found: {p}")
    if p.is_dir():
        raise ValueError(f"{p} is a directory; give a .toml or .yaml config file")
    if p.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(
            f"{p} is {p.stat().st_size:,} bytes; a config file may be at most "
            f"{MAX_CONFIG_BYTES:,} (is it the right file?)"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"{p} is not UTF-8 text (byte offset {e.start}); save it as UTF-8"
        ) from None
    if p.suffix == ".toml":
        try:
            import tomllib  # type: ignore[import-not-found,unused-ignore]  # Python >= 3.11
        except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (setup.cfg)
            import tomli as tomllib  # type: ignore[no-redef,unused-ignore]

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:  # the parser's message has no file name
            raise ValueError(f"{p} is not valid TOML: {e}") from None
    if p.suffix in (".yaml", ".yml"):
        import yaml

        try:
            with p.open(encoding="utf-8") as stream:  # marks then name the file
                data = yaml.load(stream, Loader=_strict_yaml_loader()) or {}
        except yaml.YAMLError as e:
            raise ValueError(f"{p} is not valid YAML: {e}") from None
        except RecursionError:
            raise ValueError(f"{p}: YAML nested too deeply; a config is a flat table") from None
        if not isinstance(data, dict):
            raise ValueError(f"{p} must hold a table of config keys")
        return data
    raise ValueError(f"config file must be .toml, .yaml or .yml, got {p.name}")
