"""Sizes the design keeps (issue 55, item 2), read from the source with ``ast``: no
constructor in core/ or bots/ takes more than 10 parameters (a class built from many injected
parts groups them into small typed objects: ``RunPolicy``, ``Clocks``, ``Reading``), no
function in core/research/ is over 80 lines, and the executor is at most 350 lines; and
``bots/server.py`` is at most 350 lines (item 7: the composition root builds what the server
starts).

Counted: the parameters of every ``__init__`` (``self`` aside; ``*args`` and ``**kwargs`` one
each). A dataclass's fields are not counted: those are records (a run's state, its outcome, a
message), not classes built from injected parts."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_CONSTRUCTOR_PARAMETERS = 10
MAX_RESEARCH_FUNCTION_LINES = 80
MAX_EXECUTOR_LINES = 350
MAX_SERVER_LINES = 350


def constructor_parameters(source: str) -> Iterator[tuple[str, int, int]]:
    """``(class, line, parameters)`` of every ``__init__`` in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name == "__init__":
                args = item.args
                named = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
                starred = (args.vararg is not None) + (args.kwarg is not None)
                yield node.name, item.lineno, named + starred - 1


def long_functions(source: str, limit: int) -> Iterator[tuple[str, int, int]]:
    """``(function, line, lines)`` of every function in ``source`` over ``limit`` lines
    (its decorators aside, its docstring included)."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                yield node.name, node.lineno, lines


def _sources(*folders: str) -> Iterator[tuple[str, str]]:
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")


def test_no_constructor_in_core_or_bots_takes_more_than_ten_parameters() -> None:
    found = [
        f"{path}:{line} {cls}.__init__: {count} parameters"
        for path, source in _sources("core", "bots")
        for cls, line, count in constructor_parameters(source)
        if count > MAX_CONSTRUCTOR_PARAMETERS
    ]
    assert not found, "\n".join(found)


def test_no_function_in_core_research_is_over_eighty_lines() -> None:
    found = [
        f"{path}:{line} {name}: {lines} lines"
        for path, source in _sources("core/research")
        for name, line, lines in long_functions(source, MAX_RESEARCH_FUNCTION_LINES)
    ]
    assert not found, "\n".join(found)


def test_the_executor_is_at_most_350_lines() -> None:
    lines = (ROOT / "core" / "research" / "executor.py").read_text(encoding="utf-8")
    assert len(lines.splitlines()) <= MAX_EXECUTOR_LINES


def test_the_server_is_at_most_350_lines() -> None:
    lines = (ROOT / "bots" / "server.py").read_text(encoding="utf-8")
    assert len(lines.splitlines()) <= MAX_SERVER_LINES


def test_the_counts_see_what_they_guard() -> None:
    """The counters find an oversized constructor and function when there is one (a check
    that can fail): eleven parameters, a keyword-only and a starred one among them, and a
    function of 81 lines."""
    wide = (
        "class Hub:\n    def __init__(self, a, b, c, d, e, f, g, h, i, *rest, k=1):\n        pass\n"
    )
    assert list(constructor_parameters(wide)) == [("Hub", 2, 11)]
    narrow = "class Part:\n    def __init__(self, a, *, b=2):\n        pass\n"
    assert list(constructor_parameters(narrow)) == [("Part", 2, 2)]
    body = "".join(f"    x{i} = {i}\n" for i in range(80))
    assert list(long_functions(f"def long():\n{body}", 80)) == [("long", 1, 81)]
    assert list(long_functions(f"def short():\n{body[: body.index('x79')]}", 80)) == []
