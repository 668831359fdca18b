"""The names a task row gives the judge: its entry point is written into the trusted test
source and proxied to the candidate, so only a function the reference solution defines may
be one - never a builtin the tests wrap around it (``set(f(x))``, ``abs(f(x) - y)``), a
keyword, a dunder or a name of the judge's own. A row naming anything else is refused when
it is loaded, never judged.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import re

#: prefixes of names the judge and its converters use: no row may name its entry point so
RESERVED_PREFIXES = ("_fz", "_flowzoo")
#: the reserved names a converter writes into test source, which row code may only read:
#: the JSON comparison (the judge's hidden helper) and the call of a ``Solution`` method
#: (the harness's function, proxied like any other)
CONVERTER_NAMES = frozenset({"_fz_json_eq", "_flowzoo_call"})
#: the most characters one field of a row's code may hold (a test statement, the setup, the
#: prompt, a reference solution): past it the row is refused before Python's parser sees it.
#: Parsing and compiling cost 0.3-0.7 KB of peak memory per character (measured: a literal
#: list, names, calls), so this bounds one field to a few GB; set it to take larger code
MAX_CODE_CHARS = 4 << 20
#: the most tokens one field of a row's code may hold, counted before it is parsed
#: (:func:`code_tokens`): peak memory follows tokens, not characters (measured on 1 MiB
#: fields: 480-720 bytes per token for literal lists of ints, zeros or lists, bare names and
#: calls; 2 bytes per character inside one string literal), so this bounds one field to
#: ~370 MB where 4 MiB of names once took ~3 GB. The largest shipped field (HumanEval/69's
#: ``test``) holds 894 and a generated task's 262 characters: over 580x under it, with room
#: for a contest call whose arguments are 10^5-element lists
MAX_CODE_TOKENS = 1 << 19
#: the most tokens all of one row's code may hold together (its tests, setup, prompt): the
#: judge holds every test's tree at once. The largest shipped row holds 1,221 (HumanEval/129)
MAX_ROW_CODE_TOKENS = 1 << 21
#: one token, or more: a word (name, number, keyword) or any other non-space character
#: (compiled on first use, by ``re``'s cache: a replay's run loads this module and never
#: counts tokens)
_TOKEN = r"\w+|[^\w\s]"
#: what CPython's parser and compiler raise, besides SyntaxError, on code past their limits:
#: nesting past the parser's own stack (MemoryError, e.g. ``"-" * 100_000``), past the
#: recursion limit (RecursionError, also from walking or compiling a deep tree), null bytes
#: (ValueError) and internal limits (OverflowError, SystemError)
LIMIT_ERRORS = (MemoryError, RecursionError, ValueError, OverflowError, SystemError)


class RowCodeError(ValueError):
    """A row's code Python cannot take: bad syntax (``syntax``) or past the parser's limits.
    A ValueError naming the field, so a loader's row error and the judge's ``bad_tests``
    verdict say which code failed, and no parser exception escapes one row."""

    def __init__(self, message: str, syntax: bool = False) -> None:
        super().__init__(message)
        self.syntax = syntax


def past_limits(what: str, err: BaseException) -> str:
    """Why ``what`` was refused when the parser or compiler gave up on it (not its syntax)."""
    return (
        f"{what} is past what Python's parser and compiler can take "
        f"({type(err).__name__}: nested too deeply or too large); simplify that code"
    )


def code_tokens(src: str) -> int:
    """At least the number of tokens Python's tokenizer makes of ``src`` (an over-count: every
    punctuation character and line counts one, words inside strings too), without building
    any of them: what parsing ``src`` costs in memory is proportional to it."""
    return re.subn(_TOKEN, "", src)[1] + src.count("\n")


def check_code_size(src: str, what: str) -> int:
    """``src``'s token count, or a :class:`RowCodeError` naming ``what`` and the limit when it
    holds more than :data:`MAX_CODE_CHARS` characters or :data:`MAX_CODE_TOKENS` tokens;
    checked before any parser sees it."""
    if len(src) > MAX_CODE_CHARS:
        raise RowCodeError(
            f"{what} holds {len(src):,} characters of code, past the limit of "
            f"{MAX_CODE_CHARS:,} (flowzoo.tasks.code.names.MAX_CODE_CHARS)"
        )
    n = code_tokens(src)
    if n > MAX_CODE_TOKENS:
        raise RowCodeError(
            f"{what} holds {n:,} tokens of code, past the limit of {MAX_CODE_TOKENS:,} "
            "(flowzoo.tasks.code.names.MAX_CODE_TOKENS)"
        )
    return n


def check_row_size(fields: dict[str, list[str]]) -> None:
    """A :class:`RowCodeError` naming the field when one field of a row's code is past its
    cap (:func:`check_code_size`), or naming the fields when all of them together hold more
    than :data:`MAX_ROW_CODE_TOKENS` tokens; nothing is parsed."""
    total = sum(check_code_size(src or "", k) for k, srcs in fields.items() for src in srcs)
    if total > MAX_ROW_CODE_TOKENS:
        raise RowCodeError(
            f"{', '.join(fields)} hold {total:,} tokens of code together, past the limit of "
            f"{MAX_ROW_CODE_TOKENS:,} (flowzoo.tasks.code.names.MAX_ROW_CODE_TOKENS)"
        )


def parse_code(src: str, what: str) -> ast.Module:
    """``ast.parse(src)``, or a :class:`RowCodeError` naming ``what``: code past its size caps
    (:func:`check_code_size`), bad syntax, or past the parser's limits (:data:`LIMIT_ERRORS`)."""
    check_code_size(src, what)
    try:
        tree = ast.parse(src)
    except SyntaxError as e:
        raise RowCodeError(f"{what} does not parse ({e.msg}, line {e.lineno})", True) from None
    except UnicodeEncodeError as e:  # a lone surrogate: not text a source file can hold
        raise RowCodeError(f"{what} is not valid text ({e.reason} at {e.start})", True) from None
    except LIMIT_ERRORS as e:
        raise RowCodeError(past_limits(what, e)) from None
    if ast_depth(tree) > MAX_AST_DEPTH:  # later walks and compile() recurse on this depth
        raise RowCodeError(past_limits(what, RecursionError(f"deeper than {MAX_AST_DEPTH}")))
    check_constant_hashes(tree, what)
    return tree


#: probes a row's constants may cost to compile past 4 a value (``2**24``: about 0.3 s here,
#: where 20,000 colliding keys, 4e8 probes, took 7.5 s); far above what honest rows need
#: (3,000 powers of two fall in 61 hash groups: 150,000 probes)
COMPILE_PROBE_BUDGET = 1 << 24
#: the largest result, in bits, a constant expression is folded to here (CPython folds less)
_FOLD_BITS = 4096
_NUMBER = (int, float, complex)


def check_constant_hashes(tree: ast.AST, what: str) -> None:
    """A :class:`RowCodeError` naming ``what`` when its distinct numbers share hash values
    past :data:`COMPILE_PROBE_BUDGET`. Why: ``compile`` keeps one table of a code object's
    constants, so 20,000 multiples of ``2**61 - 1`` took 7.5 s to compile in the judge's
    process, in one step no deadline interrupts. The numbers are what the compiler would
    hold: literals, and arithmetic on them folded first (``k * (2**61 - 1)`` is one
    constant). Only numbers: a str's or bytes' hash is seeded per process, so no row can plan
    a collision of them."""
    from flowzoo.tasks.code.wire import probe_cost

    nums = _folded_numbers(tree)
    if len(nums) * len(nums) <= COMPILE_PROBE_BUDGET:
        return
    # distinct values only (the compiler shares equal ones), counted after a sort: a set of
    # them would be the very table whose cost is in question
    keyed = sorted(
        (hash(v), type(v).__name__, (v.real, v.imag) if type(v) is complex else v) for v in nums
    )
    hashes = [k[0] for i, k in enumerate(keyed) if i == 0 or k != keyed[i - 1]]
    cost = probe_cost(hashes)
    if cost > 4 * len(hashes) + COMPILE_PROBE_BUDGET:
        raise RowCodeError(
            f"{what}'s numbers share hash values (about {cost:,} probes to compile): past "
            "the judge's limits; use fewer or other numbers"
        )


def _folded_numbers(tree: ast.AST) -> list:
    """The value of every largest constant number expression in ``tree`` (a literal, or
    arithmetic on literals, folded as the compiler folds it, results up to 4,096 bits)."""
    out: list = []
    todo = [tree]
    while todo:
        node = todo.pop()
        v = _number(node)
        if v is not None:
            out.append(v)
        else:
            todo.extend(ast.iter_child_nodes(node))
    return out


def _number(node: ast.AST):
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) in _NUMBER else None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
        v = _number(node.operand)
        return None if v is None else _safe(_UNARY[type(node.op)], v)
    if not isinstance(node, ast.BinOp) or isinstance(node.op, ast.MatMult):
        return None
    a = _number(node.left)
    b = None if a is None else _number(node.right)
    if b is None:
        return None
    op = type(node.op)
    ints = type(a) is int and type(b) is int
    if ints and op is ast.Mult and a.bit_length() + b.bit_length() > _FOLD_BITS:
        return None
    if ints and op is ast.Pow and b * max(abs(a).bit_length(), 1) > _FOLD_BITS:
        return None
    if ints and op is ast.LShift and (b < 0 or a.bit_length() + b > _FOLD_BITS):
        return None
    return _safe(lambda x, y: _BINARY[op](x, y), a, b)


_UNARY = {ast.USub: lambda x: -x, ast.UAdd: lambda x: +x, ast.Invert: lambda x: ~x}
_BINARY = {
    ast.Add: lambda x, y: x + y,
    ast.Sub: lambda x, y: x - y,
    ast.Mult: lambda x, y: x * y,
    ast.Div: lambda x, y: x / y,
    ast.FloorDiv: lambda x, y: x // y,
    ast.Mod: lambda x, y: x % y,
    ast.Pow: lambda x, y: x**y,
    ast.LShift: lambda x, y: x << y,
    ast.RShift: lambda x, y: x >> y,
    ast.BitOr: lambda x, y: x | y,
    ast.BitXor: lambda x, y: x ^ y,
    ast.BitAnd: lambda x, y: x & y,
}


def _safe(fn, *args):
    """``fn(*args)`` if it gives a number, else None (an error, or a type the compiler
    would not fold into a number)."""
    try:
        v = fn(*args)
    except (ArithmeticError, ValueError, TypeError):
        return None
    return v if type(v) in _NUMBER else None


#: deepest syntax tree a row's code may have: every later walk and ``compile`` recurses on
#: it, and whether they overflow depends on the interpreter's recursion limit at that moment;
#: a fixed bound makes the verdict on a row the same in every process (HumanEval and the
#: generated tasks nest 20 deep at most)
MAX_AST_DEPTH = 400


def ast_depth(tree: ast.AST) -> int:
    """The depth of ``tree``, counted without recursion (a deep tree cannot overflow it)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_AST_DEPTH:
            return d
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _reserved(name: str) -> bool:
    return name.startswith(RESERVED_PREFIXES)


def first_blank(tests: list[str] | tuple[str, ...]) -> int | None:
    """The index of the first blank test, else None: a case every program passes (partial
    credit for nothing), refused by the loaders and, in a row built by hand, by the judge."""
    return next((i for i, t in enumerate(tests) if not t.strip()), None)


def check_name(name: object, what: str = "entry_point") -> str:
    """``name`` if a row may name a function so: it is written into the trusted test source
    and proxied to the candidate, so a non-identifier (``f(); import os``), a keyword, a
    builtin (the candidate would decide ``len``/``set``/``abs`` in the tests), a dunder or a
    name of the judge's own (``_fz...``, ``_flowzoo...``) is a ValueError naming the value."""
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{what} must be a Python identifier, got {str(name)[:60]!r}")
    if _reserved(name) or (name.startswith("__") and name.endswith("__")):
        raise ValueError(
            f"{what} {name!r} is reserved for the judge (names starting with "
            f"{', '.join(RESERVED_PREFIXES)} or dunder names); name the solution's function"
        )
    if hasattr(builtins, name):
        raise ValueError(
            f"{what} {name!r} names a Python builtin; it must name a function the solution "
            "defines (not a builtin such as len, set, sorted, abs)"
        )
    return name


def _defined_functions(reference: str, what: str = "reference solution") -> list[str]:
    """The functions a reference solution defines at top level (``def``/``async def``)."""
    tree = parse_code(reference, f"the {what}")
    return [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def solution_function(
    name: object, reference: str, what: str, source: str = "reference solution"
) -> str:
    """``name`` if the reference solution defines it as a function and it may be proxied
    (:func:`check_name`): a row naming anything else is refused, never judged."""
    name = check_name(name, what)
    defined = _defined_functions(reference, source)
    if name not in defined:
        have = ", ".join(defined[:8]) or "no function"
        raise ValueError(
            f"{what} {name!r} is not a function the reference solution defines (it defines {have})"
        )
    return name


def called_names(tests: list[str], field: str = "test") -> list[str]:
    """Names called as plain functions in the tests, in source order (test by test); a test
    that does not parse is a :class:`RowCodeError` naming ``field``."""
    out: list[str] = []
    for t in tests:
        tree = parse_code(t, f"{field} {t[:60]!r}")
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        calls.sort(key=lambda n: (n.lineno, n.col_offset))
        out += [c.func.id for c in calls if isinstance(c.func, ast.Name)]
    return list(dict.fromkeys(out))


def mbpp_entry_point(tests: list[str], reference: str, field: str = "test") -> str:
    """An MBPP row's entry point, told structurally: the first name the tests call that the
    reference solution defines as a function - never a wrapper the tests call around it
    (``set(f(x))``, ``abs(f(x) - y)``, ``math.isclose(...)``), which the candidate would then
    decide. ValueError when no such name exists."""
    if not reference.strip():
        raise ValueError(
            "an MBPP row without 'entry_point' needs its reference solution 'code': the entry "
            "point is the function it defines that the tests call"
        )
    defined = set(_defined_functions(reference))
    called = called_names(tests, field)
    both = [n for n in called if n in defined]
    what = "entry point (inferred from the tests)"
    for name in both:  # a solution's own ``max`` is still a builtin's name: the next one
        try:
            return check_name(name, what)
        except ValueError:
            continue
    if both:
        check_name(both[0], what)  # raises: why the only candidates are refused
    raise ValueError(
        f"cannot tell the entry point: the tests call {', '.join(called[:8]) or 'nothing'}, "
        f"the reference solution defines {', '.join(sorted(defined)[:8]) or 'no function'}; "
        "none is both (give 'entry_point')"
    )


def check_row_code(
    tests: dict[str, list[str]], prompt: dict[str, list[str]] | None = None, entry: str = ""
) -> None:
    """ValueError naming the field when a row's code (its tests and setup, or its prompt) binds
    a name of the judge's (``_fz...``, ``_flowzoo...``) or reads one beyond
    :data:`CONVERTER_NAMES` (such a name would be the candidate's to define), or when the
    tests rebind the ``entry`` point (they would then test their own function, not the
    candidate's). Code with bad syntax is left to the compiler's own error; code past the
    parser's limits or its size caps (:func:`check_row_size`) is a :class:`RowCodeError`
    naming the field."""
    check_row_size({**(prompt or {}), **tests})
    for field, sources in {**(prompt or {}), **tests}.items():
        for src in sources:
            try:
                tree = parse_code(src or "", field)
            except RowCodeError as e:
                if e.syntax:
                    continue
                raise
            bad = sorted(
                {
                    name
                    for n in ast.walk(tree)
                    for name, reads in _node_names(n)
                    if _reserved(name) and not (reads and name in CONVERTER_NAMES)
                }
            )
            if bad:
                raise ValueError(
                    f"{field} uses {', '.join(map(repr, bad[:5]))}: names starting with "
                    f"{', '.join(RESERVED_PREFIXES)} are reserved for the judge"
                )
            if entry and field in tests and entry in _module_bound(tree):
                raise ValueError(
                    f"{field} binds the entry point {entry!r} itself: the tests would call "
                    "their own function, never the candidate's"
                )


#: nodes that open a scope of their own: what they bind inside is not the module's
_SCOPES = (
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
)


def _module_bound(tree: ast.Module) -> set[str]:
    """The names code binds in its module's namespace (a ``global`` anywhere included)."""
    out = {x for n in ast.walk(tree) if isinstance(n, ast.Global) for x in n.names}
    todo = list(ast.iter_child_nodes(tree))
    while todo:
        n = todo.pop()
        out |= {name for name, reads in _node_names(n) if not reads}
        if not isinstance(n, _SCOPES):
            todo += ast.iter_child_nodes(n)
    return out


def _node_names(n: ast.AST) -> list[tuple[str, bool]]:
    """(name, read-only?) for the names one node reads or binds."""
    if isinstance(n, ast.Name):
        return [(n.id, isinstance(n.ctx, ast.Load))]
    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [(n.name, False)]
    if isinstance(n, ast.arg):
        return [(n.arg, False)]
    if isinstance(n, ast.alias):
        return [((n.asname or n.name).split(".")[0], False)]
    if isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
        return [(n.name, False)]
    if isinstance(n, ast.MatchMapping) and n.rest:
        return [(n.rest, False)]
    if isinstance(n, (ast.Global, ast.Nonlocal)):
        return [(x, False) for x in n.names]
    return []
