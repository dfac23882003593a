"""What this build is: the installed distribution's version and the commit it was built from
(``fathom --version``, the ``fathom_build_info`` metric), and the releases before it with
the schema each one runs on (``fathom db downgrade`` names the release to deploy next).
Read from the package metadata, the build's declaration and the checkout, never from the
time, so a build says the same on any day."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "fathom-bot"

#: Set by the image's build (``--build-arg FATHOM_BUILD_COMMIT=$(git rev-parse HEAD)``) or in
#: a systemd unit's environment file: the commit the installed code was built from.
COMMIT_VARIABLE = "FATHOM_BUILD_COMMIT"

_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_SOURCE = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Release:
    """A published release and its schema: the Alembic head revision it migrates to."""

    version: str
    schema: str


#: The releases before this one, newest first (CHANGELOG.md says the same; a test checks).
#: This release's own schema is ``storage.HEAD_REVISION``.
PREVIOUS_RELEASES: tuple[Release, ...] = (Release("0.1.0", "0014"),)


def version() -> str:
    """The installed version of Fathom ("unknown" when it runs from a tree that is not
    installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def commit(environ: Mapping[str, str] | None = None) -> str:
    """The commit this build was made from: what the build declared in ``FATHOM_BUILD_COMMIT``
    (a hex commit id, anything else is not believed), else the checkout's ``HEAD`` when the
    code runs from a git checkout (development), else "unknown"."""
    declared = (os.environ if environ is None else environ).get(COMMIT_VARIABLE, "").strip()
    if _COMMIT.fullmatch(declared.lower()):
        return declared.lower()
    return _checkout_head() or "unknown"


@cache
def _checkout_head() -> str | None:
    if not (_SOURCE / ".git").exists():  # an installed wheel: no checkout to ask
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(_SOURCE), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head if _COMMIT.fullmatch(head) else None


def release_with_schema(revision: str) -> Release | None:
    """The previous release whose schema is ``revision``, if one is."""
    return next((r for r in PREVIOUS_RELEASES if r.schema == revision), None)


def python_version() -> str:
    return platform.python_version()
