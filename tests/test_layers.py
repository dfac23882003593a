"""core/ is a stack of layers that import downward only (docs/architecture.md, "Layers").

The contract itself is import-linter's, in pyproject.toml (``[tool.importlinter]``), run by
``python3 dev.py lint``. Here: it holds on this tree; it fails, naming the import, when an
upward import, an import of storage's from core, a platform SDK in core or an import of core
in storage is added on purpose to a copy of the tree; and no import is written inside a
function in core/ (where it would hide a cycle) except those of the optional heavy libraries
below, each with why.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Imports written inside a function of core/ that are allowed, by module (and its
#: submodules), each with why: a library a process may never need, costly to import.
LAZY_IMPORTS = {
    "openai": "the model client's SDK (~0.3 s); `import core.llm` must not pay it "
    "(tests/test_llm.py)",
    "trafilatura": "the page extractor (lxml and its language data), loaded off the event loop "
    "when the first page is read (tests/test_reading.py)",
    "ddgs": "the default web search's client, only with FATHOM_SEARCH=ddgs (tests/test_search.py)",
    "mcp": "the MCP SDK (~0.8 s), only with FATHOM_MCP_CONFIG",
    "mcp_types": "the MCP SDK's types, with it",
    "core.knowledge": "team knowledge (the MCP sources), built only with FATHOM_MCP_CONFIG: a "
    "process without it imports neither the package nor the SDK",
    "procrastinate": "the job queue, only with FATHOM_QUEUE=procrastinate",
    "structlog": "JSON log lines, only with FATHOM_LOG_FORMAT=json (93 ms the CLI does not pay)",
    "pypdfium2": "PDFium, in the document worker process only, never in the bot's",
    "docx": "python-docx, in the document worker process only",
    "charset_normalizer": "legacy encodings, only for a text whose encoding is in doubt",
    "json_repair": "the repair of a model's almost-JSON, only when strict parsing failed",
}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return name == "TYPE_CHECKING"


def _imports_in_functions(tree: ast.AST) -> list[tuple[int, str]]:
    """Each import written inside a function (not under ``if TYPE_CHECKING:``): its line and
    the module it imports."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for inner in child.orelse:
                    visit(inner, in_function)
                continue
            if in_function and isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name) for alias in child.names)
            elif in_function and isinstance(child, ast.ImportFrom):
                found.append((child.lineno, "." * child.level + (child.module or "")))
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            visit(child, inner)

    visit(tree, False)
    return found


def _allowed(module: str) -> str | None:
    return next((m for m in LAZY_IMPORTS if module == m or module.startswith(m + ".")), None)


def test_no_import_is_written_inside_a_function_in_core_but_an_optional_heavy_library() -> None:
    used: set[str] = set()
    hidden = []
    for path in sorted((ROOT / "core").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for line, module in _imports_in_functions(tree):
            allowed = _allowed(module)
            if allowed is None:
                hidden.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
            else:
                used.add(allowed)
    assert hidden == [], "imports inside functions (import at module level, or move the code)"
    # Every entry still names an import that is there (a stale one would allow a new one).
    assert sorted(used) == sorted(LAZY_IMPORTS)


def test_the_finder_sees_imports_in_functions_and_skips_type_checking_blocks() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import os\n"
        "if TYPE_CHECKING:\n"
        "    from core.research import report\n"
        "def f():\n"
        "    import json\n"
        "    if TYPE_CHECKING:\n"
        "        from core.engine import state\n"
        "    class Inner:\n"
        "        def g(self):\n"
        "            from core.research.report import finalize_report\n"
        "async def h():\n"
        "    from . import sibling\n"
    )
    assert _imports_in_functions(ast.parse(source)) == [
        (6, "json"),
        (11, "core.research.report"),
        (13, "."),
    ]


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """import-linter's check of the tree at ``root`` with its pyproject.toml's contracts."""
    env = dict(os.environ, PYTHONPATH=str(root))
    command = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", command, "--no-cache", "--no-logo"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_import_contract_holds() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 5 kept, 0 broken." in result.stdout


@pytest.fixture(scope="module")
def tree_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the packages and of the contract, to break on purpose."""
    copy = tmp_path_factory.mktemp("tree")
    for package in ("core", "storage", "bots"):
        shutil.copytree(
            ROOT / package, copy / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


@pytest.mark.parametrize(
    ("module", "source", "broken", "named"),
    [
        (  # the claim check importing the report: claims sit below research
            "core/claims/upward.py",
            "from core.research.report import finalize_report\n",
            "core's layers import downward only, storage below research BROKEN",
            "core.claims.upward -> core.research.report",
        ),
        (  # the same written inside a function: still an import, still upward
            "core/engine/upward.py",
            "def f():\n    from core.research import writer\n    return writer\n",
            "core's layers import downward only, storage below research BROKEN",
            "core.engine.upward -> core.research.writer",
        ),
        (  # a client importing storage: storage sits above the engine and the clients
            "core/search/stored.py",
            "import storage.runs\n",
            "core's layers import downward only, storage below research BROKEN",
            "core.search.stored -> storage.runs",
        ),
        (  # storage importing core beyond the values leaf
            "storage/upward.py",
            "from core.models import Usage\n",
            "storage imports nothing of core but the values leaf BROKEN",
            "storage.upward -> core.models",
        ),
        (  # a platform's SDK in core
            "core/slacky.py",
            "import slack_sdk\n",
            "no chat platform's SDK and no web server in core or storage BROKEN",
            "core.slacky -> slack_sdk",
        ),
        (  # core importing the bots
            "core/operations/bots.py",
            "import bots.chat.replies\n",
            "core and storage import nothing of bots BROKEN",
            "core.operations.bots -> bots.chat.replies",
        ),
    ],
)
def test_the_contract_fails_on_an_import_added_on_purpose(
    tree_copy: Path, module: str, source: str, broken: str, named: str
) -> None:
    added = tree_copy / module
    added.write_text(source, encoding="utf-8")
    try:
        result = lint_imports(tree_copy)
    finally:
        added.unlink()
    assert result.returncode == 1, result.stdout + result.stderr
    assert broken in result.stdout
    assert named in result.stdout
