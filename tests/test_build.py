"""What a build ships and says about itself: the wheel's contents, `fathom --version` and
the `fathom_build_info` metric."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from core.metrics import Metrics
from storage import HEAD_REVISION
from tests.cli import fathom

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_the_license_and_every_migration_and_no_tests(tmp_path: Path) -> None:
    """Built as an operator builds it (the backend pyproject.toml names, no download)."""
    command = [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps"]
    built = subprocess.run(
        [*command, "--no-build-isolation", "-q", "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("fathom_bot-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        fields = archive.read(meta).decode().splitlines()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert {"License-Expression: MIT", "License-File: LICENSE"} <= set(fields)
    migrations = {p.name for p in (ROOT / "migrations" / "versions").glob("0*.py")}
    assert {f"migrations/versions/{name}" for name in migrations} <= names
    assert "migrations/script.py.mako" in names and "migrations/env.py" in names
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


def test_fathom_version_says_the_installed_version_and_the_schema_it_needs(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    shown = fathom("--version", env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    installed = metadata.version("fathom-bot")
    assert shown.stdout.startswith(f"fathom {installed} (database schema {HEAD_REVISION}, ")


def test_every_process_exports_its_build() -> None:
    labels = {"version": metadata.version("fathom-bot"), "python": sys.version.split()[0]}
    assert Metrics().registry.get_sample_value("fathom_build_info", labels) == 1


def test_the_dependencies_whose_next_major_would_break_us_are_bounded() -> None:
    """A rebuild on a later day must not pick up a new major of the clients we call; each
    of these has an upper bound in pyproject.toml, and what is installed satisfies it."""
    import tomllib

    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = {Requirement(r).name.lower(): Requirement(r) for r in project["dependencies"]}
    for name in ("openai", "mcp", "slack-sdk", "slack-bolt", "lark-oapi", "procrastinate"):
        specifier = requirements[name].specifier
        assert any(s.operator == "<" for s in specifier), name
        assert metadata.version(name) in specifier, (name, metadata.version(name))
    assert any(s.operator == "<" for s in requirements["sqlalchemy"].specifier)
