"""Rows whose test code can be replayed in the judge's own process.

Why: a row's test code is untrusted, so the judge replays it in a sandbox run of its own
(``judge.py``), two runs per program besides the candidate's. But most rows' tests are
plain data: ``assert f([1, 2]) == 3`` after a setup such as ``candidate = f``. Code that
can only call the candidate's functions with literal arguments and compare the answers
with literals does nothing a sandbox could confine, so the judge replays it here and a
program costs one sandbox run, the candidate's.

A row is plain when its setup and every test pass a whitelist of syntax (:func:`is_plain`):
- setup: ``name = <literal>`` or ``name = <a candidate's name>`` (an alias), ``pass``;
- tests: ``assert <check>`` or ``assert <check>, <constant>``, ``pass``;
- a check: a comparison with ``==``, ``!=``, ``in`` or ``not in`` (made type-strict, as in
  the sandbox), ``not``, ``and``/``or``, a call, a literal;
- a call: of a name the candidate defines (or an alias of one, or the JSON comparison a
  converter writes), with arguments that are checks themselves (literals, calls,
  comparisons), no ``*``/``**``;
- a literal: constants, lists, tuples, sets and dicts of literals, a signed number;
- at most :data:`PLAIN_MAX_CHARS` characters of setup and tests.

Nothing else: no other name (builtins, modules, the prompt's helpers), no attribute, no
subscript, no operator, no loop, no definition. The row's prompt code is never run here: a
plain row's tests cannot reach any name it defines (such a name is not the candidate's), and
what a prompt does to its own replay in the sandbox (hang, patch the judge's helpers there)
only decides its own row's verdict. The replay is the same code as in the sandbox
(``replay_worker.replay``) under the same call limit and deadline; what only a sandbox run
has (a kill at the deadline plus grace, caps on its reply and files) bounds work a plain row
cannot make: no loop, no operator, at most 64 KiB of literals.
"""

from __future__ import annotations

import ast
import functools

from flowzoo.tasks.code.names import CONVERTER_NAMES, LIMIT_ERRORS, RowCodeError, parse_code
from flowzoo.tasks.code.testcode import JudgeSpec

#: the most characters of setup and tests together a plain row may have (HumanEval's largest
#: row: 1,221 tokens). A larger row's literals go to the sandbox: building a dict or set
#: display of members that share a hash costs the square of their number (20,000 took 5 s
#: here, where no deadline can interrupt it), and the sandbox's caps on a replay's files and
#: reply, which a larger row meets there, would judge it otherwise
PLAIN_MAX_CHARS = 1 << 16
_CMP = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
#: the converter's JSON comparison (the judge's own helper under a spelled name)
_HELPERS = frozenset(n for n in CONVERTER_NAMES if n.startswith("_fz"))


def _literal(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return isinstance(node.operand, ast.Constant) and type(node.operand.value) in (
            int,
            float,
            complex,
        )
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return all(_literal(e) for e in node.elts)
    if isinstance(node, ast.Dict):
        return all(k is not None and _literal(k) for k in node.keys) and all(
            _literal(v) for v in node.values
        )
    return False


def _check(node: ast.expr, callables: frozenset[str]) -> bool:
    """An expression a plain test may evaluate (see the module doc)."""
    if isinstance(node, ast.Call):
        return (
            isinstance(node.func, ast.Name)
            and node.func.id in callables
            and all(not isinstance(a, ast.Starred) and _check(a, callables) for a in node.args)
            and all(k.arg is not None and _check(k.value, callables) for k in node.keywords)
        )
    if isinstance(node, ast.Compare):
        return all(isinstance(op, _CMP) for op in node.ops) and all(
            _check(e, callables) for e in (node.left, *node.comparators)
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return _check(node.operand, callables)
    if isinstance(node, ast.BoolOp):
        return all(_check(v, callables) for v in node.values)
    return _literal(node)


def _setup_aliases(tree: ast.Module, remote: frozenset[str]) -> frozenset[str] | None:
    """The names a plain setup binds to the candidate's functions, or None if not plain."""
    aliases: set[str] = set()
    for st in tree.body:
        if isinstance(st, ast.Pass):
            continue
        if not (
            isinstance(st, ast.Assign)
            and len(st.targets) == 1
            and isinstance(st.targets[0], ast.Name)
        ):
            return None
        name, value = st.targets[0].id, st.value
        if name in remote or name in _HELPERS:
            return None  # rebinding a proxied name: leave it to the sandbox
        if isinstance(value, ast.Name) and value.id in remote:
            aliases.add(name)
        elif _literal(value):
            aliases.discard(name)
        else:
            return None
    return frozenset(aliases)


def _plain_test(tree: ast.Module, callables: frozenset[str]) -> bool:
    for st in tree.body:
        if isinstance(st, ast.Pass):
            continue
        if not isinstance(st, ast.Assert):
            return False
        if st.msg is not None and not isinstance(st.msg, ast.Constant):
            return False
        if not _check(st.test, callables):
            return False
    return True


@functools.lru_cache(maxsize=1024)
def _plain_source(setup: str, tests: tuple, remote: tuple[str, ...]) -> bool:
    names = frozenset(remote)
    try:
        aliases = _setup_aliases(parse_code(setup, "setup"), names)
        if aliases is None:
            return False
        callables = names | aliases | _HELPERS
        return all(_plain_test(parse_code(t, "test"), callables) for t in tests)
    except (RowCodeError, SyntaxError, *LIMIT_ERRORS):
        return False  # the sandbox's replay says what is wrong with it


def is_plain(spec: JudgeSpec) -> bool:
    """Whether ``spec``'s setup and tests pass the whitelist (the module doc): replayed in
    the judge's process, its prompt not run. The size cap is checked before the cache, so
    the cache holds at most 1,024 rows of at most :data:`PLAIN_MAX_CHARS` each."""
    if not spec.source or spec.modules:
        return False
    _, _, setup, tests = spec.source
    if len(setup or "") + sum(map(len, tests)) > PLAIN_MAX_CHARS:
        return False
    return _plain_source(setup or "", tuple(tests), spec.remote)
