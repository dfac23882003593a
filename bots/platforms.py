"""The registry: every chat platform this code has, in the order ``/readyz`` shows them.

Each entry is a line: the platform's name (the first part of its thread keys and of its
routes), what people call it, and the dotted name of its
:class:`~bots.chat.platform.ChatPlatform` subclass (deer-flow's channel registry, sentry's
integrations). Importing this module imports no platform: a platform's package is imported
when its class is first asked for (:meth:`PlatformEntry.load`), and its SDK only when it is
opened, so ``fathom serve --help`` and an answer naming the platforms
(:func:`titles`) import none of them.

Adding a platform is writing its package (``bots/<name>/``: a settings class, a
:class:`~bots.chat.platform.ChatPlatform` subclass, its translation both ways) and adding its
line here; ``fathom serve``, ``fathom worker``, readiness, shutdown, the digest checks and
the delivery sweep pick it up from this tuple.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bots.chat.platform import ChatPlatform
    from core.config import ConfigError

    PlatformClass = type[ChatPlatform[Any]]


@dataclass(frozen=True)
class PlatformEntry:
    """One line of the registry: a platform by name, title and dotted class name."""

    #: The first part of its thread keys (``slack:T1:C1:1712.5``) and of its routes.
    name: str
    #: What people call it (in answers, errors and ``fathom serve --help``).
    title: str
    #: Its :class:`~bots.chat.platform.ChatPlatform` subclass, ``package.module:Class``.
    target: str

    def load(self) -> PlatformClass:
        """The platform's class, imported on first use (``ConfigError``, one line, when it
        cannot be: :meth:`unavailable`); it is given this entry's :attr:`name` and
        :attr:`title`. Asking again is cheap: Python keeps the imported module."""
        from bots.chat.platform import ChatPlatform

        module_name, _, class_name = self.target.partition(":")
        with self.importing():
            module = importlib.import_module(module_name)
        cls = getattr(module, class_name, None)
        if not (isinstance(cls, type) and issubclass(cls, ChatPlatform)):
            raise self.unavailable(f"{self.target} is not a ChatPlatform subclass")
        for attribute in ("name", "title"):
            own = cls.__dict__.get(attribute)
            if own is not None and own != getattr(self, attribute):
                said = getattr(self, attribute)
                raise self.unavailable(
                    f"{self.target} says its {attribute} is {own!r}, its line {said!r}"
                )
        cls.name, cls.title = self.name, self.title
        return cls

    @contextmanager
    def importing(self) -> Iterator[None]:
        """An import that fails in the body (the platform's package on :meth:`load`, its SDK
        when it is opened) becomes one ``ConfigError`` line naming the platform and the
        package that is missing."""
        try:
            yield
        except ImportError as exc:
            missing = exc.name or str(exc)
            raise self.unavailable(
                f"the Python package {missing!r} cannot be imported ({exc}); install Fathom's "
                f"requirements (requirements/run.txt), or leave {self.title}'s credentials unset"
            ) from exc

    def unavailable(self, why: str) -> ConfigError:
        """Why this platform cannot be used here, as one ``ConfigError`` line."""
        from core.config import ConfigError  # (not at import: the registry stays light)

        return ConfigError(f"{self.title} ({self.name}) cannot be used: {why}")


#: Every chat platform, by registration order.
PLATFORMS: tuple[PlatformEntry, ...] = (
    PlatformEntry("slack", "Slack", "bots.slack.platform:SlackPlatform"),
    PlatformEntry("feishu", "Feishu/Lark", "bots.feishu.platform:FeishuPlatform"),
    PlatformEntry("dingtalk", "DingTalk", "bots.dingtalk.platform:DingTalkPlatform"),
    PlatformEntry("teams", "Microsoft Teams", "bots.teams.platform:TeamsPlatform"),
)

#: The registry a process uses (:data:`PLATFORMS`, or more in a test).
Registry = tuple[PlatformEntry, ...]


def classes(registry: Registry = PLATFORMS) -> tuple[PlatformClass, ...]:
    """Every registered platform's class (each imported on first use)."""
    return tuple(entry.load() for entry in registry)


def secret_patterns(registry: Registry = PLATFORMS) -> tuple[str, ...]:
    """Every platform's credential patterns, for the log redaction."""
    return tuple(pattern for cls in classes(registry) for pattern in cls.secret_patterns())


def titles(registry: Registry = PLATFORMS) -> dict[str, str]:
    """Each platform's name and what people call it (``{"slack": "Slack", ...}``), from the
    registry's lines (no platform is imported)."""
    return {entry.name: entry.title for entry in registry}
