"""What a build ships and says about itself: the wheel's contents, `fathom --version` and
the `fathom_build_info` metric."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from core import build
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
    assert "core/evaluation/judge_pairs.jsonl" in names  # fathom eval --judge-check's set
    assert not any(n.startswith(("tests/", "bench/")) for n in names)


def test_fathom_version_says_the_installed_version_and_the_schema_it_needs(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    cli_env["FATHOM_BUILD_COMMIT"] = "0123456789abcdef0123456789abcdef01234567"
    shown = fathom("--version", env=cli_env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    installed = metadata.version("fathom-bot")
    assert shown.stdout.startswith(
        f"fathom {installed} (commit 0123456789abcdef0123456789abcdef01234567, "
        f"database schema {HEAD_REVISION}, "
    )


def test_the_build_commit_is_what_the_build_declared_or_the_checkout_or_unknown() -> None:
    """The image declares it (FATHOM_BUILD_COMMIT, its build argument); text that is not a
    commit id is not believed; from a git checkout, its HEAD (this suite runs in one)."""
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert build.commit({"FATHOM_BUILD_COMMIT": "ABCDEF1234"}) == "abcdef1234"
    for untrue in ("", "main", "abc", "1234567; rm -rf /", "g" * 40, "a" * 41):
        assert build.commit({"FATHOM_BUILD_COMMIT": untrue}) == head, untrue
    assert build.commit({}) == head


def test_every_process_exports_its_build() -> None:
    labels = {
        "version": metadata.version("fathom-bot"),
        "python": sys.version.split()[0],
        "commit": build.commit(),
    }
    assert Metrics().registry.get_sample_value("fathom_build_info", labels) == 1


def test_the_release_says_what_it_is_in_the_changelog_the_docs_and_the_install() -> None:
    """Each release has its own version (two releases both called 0.1.0 five migrations
    apart, issue 54): pyproject.toml's version heads CHANGELOG.md with this release's schema
    (storage.HEAD_REVISION), each previous release core.build knows is there with its own, the
    image tag in the docs is the version, and this venv was installed from this version
    (``python3 dev.py`` reinstalls when pyproject.toml changes)."""
    import re
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## (\S+)\n\nSchema: \*\*(\d{4}) to (\d{4})\*\*", changelog, re.M)
    assert releases, "CHANGELOG.md has no release entry"
    newest, *older = releases
    assert newest[0] == version, f"CHANGELOG.md's newest entry is {newest[0]}, not {version}"
    assert newest[2] == HEAD_REVISION, (
        f"a migration was added: CHANGELOG.md's {version} entry must name schema {HEAD_REVISION}"
    )
    assert [(v, last) for v, _, last in older] == [
        (r.version, r.schema) for r in build.PREVIOUS_RELEASES
    ]
    for (_, first, _), (_, _, last_before) in zip(releases, older, strict=False):
        assert int(first) == int(last_before) + 1  # the ranges meet, nothing left out
    operations = (ROOT / "docs" / "operations.md").read_text()
    tags = set(re.findall(r"registry\.example\.com/fathom:(\S+?)[`\s]", operations))
    assert tags == {version}
    kustomization = (ROOT / "deploy" / "kubernetes" / "kustomization.yaml").read_text()
    assert f'newTag: "{version}"' in kustomization
    compose = (ROOT / "deploy" / "docker-compose.yml").read_text()
    assert re.findall(r"^  image: fathom:(\S+)", compose, re.M) == [version]
    assert metadata.version("fathom-bot") == version, "reinstall: python3 dev.py"


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


def _locked(name: str) -> dict[str, tuple[str, int]]:
    """A lock file's pins: package -> (version, number of hashes)."""
    from packaging.utils import canonicalize_name

    pins: dict[str, tuple[str, int]] = {}
    text = (ROOT / "requirements" / name).read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        requirement, *hashes = line.split("--hash=")
        spec = requirement.split(";")[0].strip()
        package, version = spec.split("==")
        pins[canonicalize_name(package.split("[")[0])] = (version.strip(), len(hashes))
    return pins


def test_the_locks_pin_every_requirement_with_hashes_and_this_environment_installed_them() -> None:
    """requirements/*.txt (``python3 dev.py lock``) pin everything pyproject.toml asks for,
    each with its files' hashes, the run lock at the dev lock's versions; and the venv the
    suite runs in was installed from the dev lock (dev.py and CI install it with
    --require-hashes in a fresh venv): a dependency added to pyproject.toml without a new
    lock fails here."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    dev, run, build = _locked("dev.txt"), _locked("run.txt"), _locked("build.txt")
    assert all(hashes for _, hashes in (dev | run | build).values())
    assert {name: pin for name, pin in run.items() if dev[name] != pin} == {}
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    asked = [Requirement(r) for r in project["dependencies"]]
    for where, requirements in (
        (run, asked),
        (dev, asked + [Requirement(r) for r in project["optional-dependencies"]["dev"]]),
        (build, [Requirement(r) for r in pyproject["build-system"]["requires"]]),
    ):
        for requirement in requirements:
            if requirement.marker is not None and not requirement.marker.evaluate():
                continue
            name = canonicalize_name(requirement.name)
            assert name in where, f"{name} is not locked: python3 dev.py lock"
            assert requirement.specifier.contains(where[name][0], prereleases=True), name
    for name, (version, _) in dev.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:  # a platform's or an older Python's only
            continue
        assert installed == version, f"{name} {installed} is installed, {version} locked"


def test_the_image_installs_the_locks_with_their_hashes() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "pip install --require-hashes -r /src/requirements/run.txt" in dockerfile
    assert "pip install --require-hashes -r /src/requirements/build.txt" in dockerfile
    assert "--no-deps --no-build-isolation" in dockerfile  # nothing unlocked is fetched


def test_every_documented_install_installs_pip_by_hash_before_the_locks() -> None:
    """pip before 23.3 (Debian 12's 23.0.1, RHEL 9's python3.11 22.3.1, CPython 3.11.7's
    bundled 23.2.1) refuses requirements/run.txt in --require-hashes mode: justext asks for
    ``lxml[html_clean]``, which it takes for an unpinned requirement (issue 54, tried with
    pip 23.0.1 and 22.3.1; .ci/install-with-old-pip runs the install with them). So each
    install puts the pip of requirements/pip.txt, pinned by hash, in the venv first."""
    from packaging.version import Version

    pip = _locked("pip.txt")
    assert set(pip) == {"pip"} and pip["pip"][1] >= 1
    assert Version(pip["pip"][0]) >= Version("23.3")
    bootstrap = "pip install --require-hashes -r {}requirements/pip.txt"
    installs = {
        "docs/operations.md": ("", "requirements/run.txt"),
        "deploy/Dockerfile": ("/src/", "/src/requirements/run.txt"),
    }
    for name, (prefix, lock) in installs.items():
        text = (ROOT / name).read_text()
        first = text.find(bootstrap.format(prefix))
        assert first != -1, f"{name} does not install requirements/pip.txt"
        assert first < text.find(f"--require-hashes -r {lock}"), name
    dev = (ROOT / "dev.py").read_text()
    assert dev.find('"pip.txt")], check=True') < dev.find('"dev.txt")], check=True')
    ci = (ROOT / ".ci" / "run").read_text()
    assert ".ci/install-with-old-pip 22.3.1" in ci
