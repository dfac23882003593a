"""What this build is: the installed distribution's version (``fathom --version``, the
``fathom_build_info`` metric). Read from the package metadata, never from the time or a
checkout, so a build says the same on any day."""

from __future__ import annotations

import platform
from importlib import metadata

DISTRIBUTION = "fathom-bot"


def version() -> str:
    """The installed version of Fathom ("unknown" when it runs from a tree that is not
    installed)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


def python_version() -> str:
    return platform.python_version()
