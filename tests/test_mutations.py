"""The mutation check's own guard (bench/mutations.py): every mutant still points at code that
is there, and a mutant whose code moved is named, not skipped. (Whether each mutant is killed
is the check itself: ``python3 dev.py mutants``, CI's subset in ``.ci/run``.)"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def mutations() -> Iterator[ModuleType]:
    """bench/mutations.py, a script (bench/ is no package): loaded from its file."""
    spec = importlib.util.spec_from_file_location(
        "fathom_mutations", ROOT / "bench" / "mutations.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def test_every_mutant_s_snippet_is_in_its_file_exactly_once(mutations: ModuleType) -> None:
    """A refactor that moves a guarded line re-points its mutant in the same change."""
    assert mutations.rotted(ROOT, mutations.MUTANTS) == []
    names = [m.name for m in mutations.MUTANTS]
    assert len(names) == len(set(names)) >= 25
    assert {m.name for m in mutations.MUTANTS if not m.ci} == {
        "statement-tools",
        "statement-writes",
        "internal-sources",
    }


def test_a_mutant_whose_code_moved_is_named_and_fails_the_check(
    mutations: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = mutations.MUTANTS[:2]
    gone = replace(first, old=first.old + "# a line nobody wrote\n")
    twice = replace(second, file="tests/test_mutations.py", old="mutations")
    noop = replace(first, name="noop", new=first.old)
    problems = mutations.rotted(ROOT, [gone, second, twice, noop])
    assert len(problems) == 3
    assert problems[0].startswith(f"{first.name}: the snippet occurs 0 times in {first.file}")
    assert problems[1].startswith(f"{second.name}: the snippet occurs ")
    assert problems[2] == "noop: the mutation changes nothing"

    monkeypatch.setattr(mutations, "MUTANTS", (gone, second))
    assert mutations.main(["--check-snippets"]) == 2
    err = capsys.readouterr().err
    assert f"MUTANT ROTTED: {first.name}: " in err and second.name + ":" not in err
    assert "1 mutant(s) point at code that is not there" in err
