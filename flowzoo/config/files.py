"""Reading a TOML or YAML config file into a plain table, refusing what would be read wrong.

Why strict: a config file decides a run. YAML silently keeps the last of two duplicate keys
(``lr`` given twice: one is ignored without a word) and its aliases let a few hundred bytes
expand into a config of gigabytes; both are refused here, with the file and line named. TOML
already refuses duplicate keys. A file larger than ``MAX_CONFIG_BYTES`` is refused unread.

YAML is read with the YAML 1.2 core schema (:func:`yaml_loader`, the one loader of every
YAML file flowzoo reads: training configs and sweep files), not PyYAML's YAML 1.1 rules, which
turn plain text into numbers and booleans no one meant: ``010`` is the integer 10 (decimal,
as in YAML 1.2 and TOML; 1.1 read 8), ``0o10`` is 8, ``0x1f`` is 31, ``1e-5`` is a float
(1.1 read a string), ``1:05`` is the string "1:05" (1.1 read 65, base 60), ``1_000`` is a
string (1.1 read 1000), ``yes``/``no``/``on``/``off``/``y``/``n`` are strings (1.1 read
booleans; a bool setting given one is then refused by its field's check, naming it), only
``true``/``false`` (any case form of the spec) are booleans, ``2024-01-02`` is a string (1.1
read a date), ``<<`` is a plain key (1.1 merged a table). Tags outside the core schema
(``!!timestamp``, ``!!binary``, ``!!set``, ``!!omap``, ``!!pairs``, ``!!merge``) and a ``%YAML``
directive of another version than 1.2 are refused, named, as is a core tag on a value it does
not fit (``!!int 1:05``).
"""

from __future__ import annotations

import functools
import math
import os
import re
from pathlib import Path
from typing import Any

#: the largest config file read (a real one is a few kilobytes)
MAX_CONFIG_BYTES = 1 << 20

#: YAML 1.2 core schema (spec 10.3.2): a plain scalar matching one of these is of that type
_CORE = {
    "null": r"null|Null|NULL|~|",
    "bool": r"true|True|TRUE|false|False|FALSE",
    "int": r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+",
    "float": r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?"
    r"|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)",
}
#: the first characters each type's plain scalars can start with (PyYAML's resolver index)
_FIRST = {
    "null": ["n", "N", "~", ""],
    "bool": list("tTfF"),
    "int": list("-+0123456789"),
    "float": list("-+.0123456789"),
}
_TAG = "tag:yaml.org,2002:"


@functools.lru_cache(maxsize=1)
def yaml_loader() -> type:
    """The one YAML loader: the YAML 1.2 core schema (module doc) on PyYAML's safe loader,
    refusing duplicate keys and aliases (``*name``)."""
    import yaml

    def core(kind: str, node: Any, loader: Any) -> str:
        text = loader.construct_scalar(node)
        if not re.fullmatch(_CORE[kind], text):
            raise yaml.constructor.ConstructorError(
                None,
                None,
                f"{text!r} is not {'an' if kind == 'int' else 'a'} {kind} in YAML 1.2",
                node.start_mark,
            )
        return str(text)

    def construct_null(loader: Any, node: Any) -> None:
        core("null", node, loader)

    def construct_bool(loader: Any, node: Any) -> bool:
        return core("bool", node, loader).lower() == "true"

    def construct_int(loader: Any, node: Any) -> int:
        t = core("int", node, loader)
        return int(t[2:], 8) if t[:2] == "0o" else int(t[2:], 16) if t[:2] == "0x" else int(t)

    def construct_float(loader: Any, node: Any) -> float:
        t = core("float", node, loader).lower()
        if t.endswith(".inf"):
            return -math.inf if t.startswith("-") else math.inf
        return math.nan if t == ".nan" else float(t)

    class CoreLoader(yaml.SafeLoader):
        """PyYAML's safe loader, resolving and constructing by the YAML 1.2 core schema."""

        yaml_implicit_resolvers: dict = {}
        yaml_constructors = {
            k: v
            for k, v in yaml.SafeLoader.yaml_constructors.items()
            # None: any other tag (timestamp, binary, set, omap, merge, ...), refused, named
            if k in (f"{_TAG}str", f"{_TAG}seq", f"{_TAG}map", None)
        }

        def process_directives(self):  # noqa: ANN202 - PyYAML's signature
            if self.check_token(yaml.tokens.DirectiveToken):
                token = self.peek_token()
                if token.name == "YAML" and tuple(token.value) != (1, 2):
                    raise yaml.parser.ParserError(
                        None,
                        None,
                        f"%YAML {'.'.join(map(str, token.value))}: a flowzoo config is read "
                        "as YAML 1.2 only; remove the directive (or write %YAML 1.2)",
                        token.start_mark,
                    )
            return super().process_directives()

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

    for kind in ("null", "bool", "int", "float"):  # int before float: "1" is an int
        CoreLoader.add_implicit_resolver(
            f"{_TAG}{kind}", re.compile(f"^(?:{_CORE[kind]})$"), _FIRST[kind]
        )
    for kind, fn in (
        ("null", construct_null),
        ("bool", construct_bool),
        ("int", construct_int),
        ("float", construct_float),
    ):
        CoreLoader.add_constructor(f"{_TAG}{kind}", fn)
    return CoreLoader


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
                data = yaml.load(stream, Loader=yaml_loader()) or {}
        except yaml.YAMLError as e:
            raise ValueError(f"{p} is not valid YAML: {e}") from None
        except RecursionError:
            raise ValueError(f"{p}: YAML nested too deeply; a config is a flat table") from None
        if not isinstance(data, dict):
            raise ValueError(f"{p} must hold a table of config keys")
        return data
    raise ValueError(f"config file must be .toml, .yaml or .yml, got {p.name}")
