"""The task's test code (a row's, replayed confined unless plain: see ``replay_worker``,
``plain``), made ready for
the judge: compiled once per task, with every ``==``/``!=``/``in``/``not in`` made
type-strict and every ``assert`` made tolerant of the placeholders that stand in for results
not known yet (see ``judge.py``), and the names it uses sorted into the candidate's
(proxied), the prompt's helpers and stdlib modules.
"""

from __future__ import annotations

import ast
import builtins
import functools
import os
import sys
import threading
from typing import Any, NamedTuple

from flowzoo.tasks.code.names import (
    LIMIT_ERRORS,
    RowCodeError,
    check_name,
    check_row_code,
    parse_code,
    past_limits,
)
from flowzoo.tasks.code.wire import strict_eq, strict_in


class Pending:
    """The stand-in for a result not known yet while calls are being recorded: absorbs every
    operation (and is truthy) so the test code keeps running and reveals its later calls."""

    def _self(self, *a: Any, **k: Any) -> Pending:
        return self

    __call__ = __getitem__ = __getattr__ = _self
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _self
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _self
    __pow__ = __rpow__ = __neg__ = __pos__ = __abs__ = __round__ = __and__ = __or__ = _self
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _self

    def __bool__(self) -> bool:
        return True

    def __iter__(self):
        return iter(())

    def __len__(self) -> int:
        return 0

    def __contains__(self, item: Any) -> bool:
        return True

    def __index__(self) -> int:
        return 0

    __int__ = __index__

    def __float__(self) -> float:
        return 0.0

    __hash__ = object.__hash__


def _hidden(name: str) -> str:
    """The judge's own name for a helper: not an identifier, so no row's source, no row's
    name and no candidate's definition can spell it (the judge puts it in the test code's
    namespace and writes it into the compiled tree itself)."""
    return f"fz:{name}"


_OPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.In: "in", ast.NotIn: "notin"}
#: the helper names test source may spell (a converter's ``_fz_json_eq``): each is read as
#: the judge's hidden helper, never as a name the row or the candidate could bind
_SPELLED = {"_fz_json_eq": _hidden("json_eq")}
_OP_NAMES = {
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Is: "is",
    ast.IsNot: "is not",
}


class _StrictCompare(ast.NodeTransformer):
    """``a == b`` -> ``fz:eq(a, b)`` (likewise ``!=``, ``in``, ``not in``, and chains);
    ``assert t, m`` -> ``if not fz:check(t): raise AssertionError(m)``, so that while calls
    are being recorded a failed assertion (about a placeholder) does not hide later calls.
    Every helper is reached by its hidden name (see :func:`_hidden`)."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if isinstance(node.ctx, ast.Load) and node.id in _SPELLED:
            return ast.copy_location(ast.Name(_SPELLED[node.id], ast.Load()), node)
        return node

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        self.generic_visit(node)
        check = ast.Call(ast.Name(_hidden("check"), ast.Load()), [node.test], [])
        exc = ast.Call(ast.Name("AssertionError", ast.Load()), [node.msg] if node.msg else [], [])
        new = ast.If(ast.UnaryOp(ast.Not(), check), [ast.Raise(exc, None)], [])
        return ast.copy_location(new, node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        if not any(type(op) in _OPS for op in node.ops):
            return node
        if len(node.ops) == 1:
            fn = _hidden(_OPS[type(node.ops[0])])
            call = ast.Call(ast.Name(fn, ast.Load()), [node.left, node.comparators[0]], [])
        else:
            args: list[ast.expr] = [node.left]
            for op, right in zip(node.ops, node.comparators, strict=False):
                args += [ast.Constant(_OP_NAMES[type(op)]), right]
            call = ast.Call(ast.Name(_hidden("chain"), ast.Load()), args, [])
        return ast.copy_location(call, node)


def _placeholder_aware(rule: Any, negate: bool) -> Any:
    """A comparison for rewritten test code: the strict ``rule`` (or its negation), and true
    whenever either side is a placeholder, so recording runs past it."""

    def compare(a: Any, b: Any) -> bool:
        if type(a) is Pending or type(b) is Pending:
            return True
        return bool(rule(a, b)) is not negate

    return compare


_eq = _placeholder_aware(strict_eq, False)
_ne = _placeholder_aware(strict_eq, True)
_in = _placeholder_aware(strict_in, False)
_notin = _placeholder_aware(strict_in, True)


_NATIVE = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "is": lambda a, b: a is b,
    "is not": lambda a, b: a is not b,
    "==": _eq,
    "!=": _ne,
    "in": _in,
    "not in": _notin,
}


def _chain(first: Any, *rest: Any) -> bool:
    left = first
    for i in range(0, len(rest), 2):
        op, right = rest[i], rest[i + 1]
        if not _NATIVE[op](left, right):
            return False
        left = right
    return True


def _as_json(v: Any, depth: int = 0) -> Any:
    """Plain data as JSON would carry it: tuples become lists (recursively)."""
    if depth > 64:
        return v
    if type(v) in (list, tuple):
        return [_as_json(x, depth + 1) for x in v]
    if type(v) is dict:
        return {k: _as_json(x, depth + 1) for k, x in v.items()}
    return v


def _json_eq(got: Any, expected: Any) -> bool:
    """A function-call test's comparison (APPS/LiveCodeBench ``fn_name`` tests): the result
    equals the expected JSON value with tuples read as lists, or - as APPS grades - the single
    element of a one-element expected list."""
    if type(got) is Pending:
        return True
    got = _as_json(got)
    if strict_eq(got, expected):
        return True
    return type(expected) is list and len(expected) == 1 and strict_eq(got, expected[0])


#: the judge's helpers by their hidden names (``judge.replay`` adds ``fz:check``)
HELPERS = {
    _hidden("eq"): _eq,
    _hidden("ne"): _ne,
    _hidden("in"): _in,
    _hidden("notin"): _notin,
    _hidden("chain"): _chain,
    _hidden("json_eq"): _json_eq,
}
CHECK = _hidden("check")


def _strict_tree(src: str, what: str) -> ast.Module:
    tree = parse_code(src, what)
    try:  # walking a deep tree recurses: past the limit it is the row's failure, named
        return ast.fix_missing_locations(_StrictCompare().visit(tree))
    except LIMIT_ERRORS as e:
        raise RowCodeError(past_limits(what, e)) from None


def _compile(tree: ast.Module, filename: str, what: str) -> Any:
    """``compile`` of a row's tree; the compiler's own limits are the row's failure, named."""
    try:
        return compile(tree, filename, "exec")
    except LIMIT_ERRORS as e:
        raise RowCodeError(past_limits(what, e)) from None


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name the code binds anywhere (assignments, defs, imports, parameters...)."""
    out: set[str] = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
    return out


def _top_level_names(tree: ast.Module) -> set[str]:
    out: set[str] = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        else:
            out |= _bound_names(n)
    return out


def _loaded_names(tree: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


class JudgeSpec(NamedTuple):
    """A task's test code, compiled once: which names are the candidate's, the
    prompt's helper code, the setup and one code object per test case."""

    remote: tuple[str, ...]
    modules: tuple[str, ...]
    prompt: Any
    setup: Any
    cases: tuple[Any, ...]
    n_cases: int
    #: what it was compiled from (entry point, prompt code, setup, tests): the replay's
    #: sandbox run compiles its own copy from it
    source: tuple = ()


#: CPython 3.11 can fail compiling AST objects from several threads at once ("AST constructor
#: recursion depth mismatch", seen scoring with a thread pool): one compile at a time
_COMPILE_LOCK = threading.Lock()


def _renew_compile_lock() -> None:
    """A forked child gets the lock free (a thread holding it at the fork is not in the
    child). Not ``forksafe.ForkLock``: this module also runs inside the replay's sandbox,
    where only the shipped modules exist."""
    global _COMPILE_LOCK
    _COMPILE_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_renew_compile_lock)


def judge_spec(entry_point: str, prompt_code: str, setup: str, tests: tuple[str, ...]) -> JudgeSpec:
    """Compile a task's test code for the judge (cached per task; thread-safe). Code that
    does not parse or compile, or is past the parser's limits, is a ValueError naming the
    field (:class:`~flowzoo.tasks.code.names.RowCodeError`), never a parser exception."""
    with _COMPILE_LOCK:
        return _judge_spec(entry_point, prompt_code, setup, tests)


@functools.lru_cache(maxsize=512)
def _judge_spec(
    entry_point: str, prompt_code: str, setup: str, tests: tuple[str, ...]
) -> JudgeSpec:
    prompt = None
    prompt_names: set[str] = set()
    if prompt_code.strip():
        try:  # the prompt's own helpers (e.g. HumanEval's encode_cyclic) are the tests' code
            tree = parse_code(prompt_code, "prompt_code")
            prompt = _compile(tree, "prompt.py", "prompt_code")
            prompt_names = _top_level_names(tree)
        except (RowCodeError, SyntaxError) as e:  # bad syntax: no helpers; past limits: refused
            if isinstance(e, RowCodeError) and not e.syntax:
                raise
            prompt = None
    if entry_point:
        check_name(entry_point)
    check_row_code(
        {"setup": [setup], "tests": list(tests)}, {"prompt_code": [prompt_code]}, entry_point
    )
    trees = [_strict_tree(setup or "", "setup")]
    trees += [_strict_tree(t, f"test {i}") for i, t in enumerate(tests)]
    bound = set().union(*(_bound_names(t) for t in trees)) | prompt_names
    loaded = set().union(*(_loaded_names(t) for t in trees))
    # the hidden helpers are no identifiers: never free, never proxied
    free = {n for n in loaded - bound if n.isidentifier() and not hasattr(builtins, n)}
    # a stdlib module the tests use without importing it (the reference solution did)
    modules = tuple(sorted(n for n in free if n in sys.stdlib_module_names and n != entry_point))
    remote = tuple(sorted((free - set(modules)) | ({entry_point} if entry_point else set())))
    return JudgeSpec(
        remote=remote,
        modules=modules,
        prompt=prompt,
        setup=_compile(trees[0], "setup.py", "setup"),
        cases=tuple(_compile(t, f"test_{i}.py", f"test {i}") for i, t in enumerate(trees[1:])),
        n_cases=len(tests),
        source=(entry_point, prompt_code, setup, tests),
    )
