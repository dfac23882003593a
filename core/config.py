"""Configuration from the environment and ``.env``: the base every part's settings share
(:class:`EnvSettings`, :func:`env`, :func:`load`, :class:`ConfigError`) and the defaults that
more than one part reads. It imports nothing of core: every layer may build on it.

Each part owns its settings next to its code: core's own in :mod:`core.settings`, the chat
layer's in ``bots.chat.settings``, each platform's in its package (``bots.slack.settings``,
...), each strategy's in its module. All of them read the same
environment variables (docs/configuration.md lists them), and :func:`load` turns any validation
problem into one :class:`ConfigError` whose message names the variable and what is
expected, so the CLI can print a single clear line instead of a traceback.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, TypeVar

from pydantic import AliasChoices, ValidationError
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: A comma-separated list in the environment (``U1,U2``), a list in code.
CommaList = Annotated[list[str], NoDecode]
#: How long an election's lease lasts without renewal (seconds): the default of
#: ``FATHOM_LEASE`` and of ``core.operations.election.Election``.
LEASE = 45.0
#: The claim check's own time budget (seconds): the default of ``FATHOM_VERIFY_SECONDS`` and
#: of ``core.claims.deadline.Deadline``. A depth-3 report's check is one verifier call, a
#: second one when a claim is re-cited by a verdict, and a reviser call (each a few seconds on
#: a hosted model): 30 s leaves room for them on a slow endpoint and cuts a hanging verifier
#: off at a quarter of one 120 s model call (FATHOM_LLM_TIMEOUT).
VERIFY_SECONDS = 30.0
#: Variables whose given value is never repeated in an error (it may hold a password, or a
#: key in its user part or query).
_UNECHOED = frozenset(
    {"DATABASE_URL", "OPENAI_BASE_URL", "FATHOM_WRITER_BASE_URL", "FATHOM_MCP_TOKEN"}
)


class ConfigError(Exception):
    """A setting is missing or invalid; the message is meant for the operator."""


def env(name: str) -> AliasChoices:
    """The alias of a field read from the environment variable ``name`` (any case)."""
    return AliasChoices(name, name.lower())


def split_commas(value: object) -> object:
    """``U1, U2`` -> ``["U1", "U2"]`` (for a :data:`CommaList` field's ``before`` validator)."""
    if isinstance(value, str):
        return [item.strip() for item in value.split(",") if item.strip()]
    return value


def lowered(value: object) -> object:
    """A choice read case-insensitively (for a ``before`` validator)."""
    return value.strip().lower() if isinstance(value, str) else value


def parse_duration(value: str) -> timedelta | None:
    """Seconds (``3600``) or a number with a unit (``30m``, ``24h``, ``7d``, ``12w``); None
    when ``value`` is neither."""
    text = value.strip().lower()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    if text and text[-1] in units and text[:-1].strip().replace(".", "", 1).isdigit():
        return timedelta(seconds=float(text[:-1]) * units[text[-1]])
    if text.replace(".", "", 1).isdigit():
        return timedelta(seconds=float(text))
    return None


class EnvSettings(BaseSettings):
    """Settings read from the environment and ``.env``: the base of every part's settings."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=False,
    )


SettingsT = TypeVar("SettingsT", bound=BaseSettings)


def variable_for(settings_class: type[BaseSettings], field: str) -> str:
    """The environment variable a field is read from, for error messages."""
    info = settings_class.model_fields.get(field)
    alias = info.validation_alias if info else None
    if isinstance(alias, AliasChoices) and alias.choices:
        first = alias.choices[0]
        return first if isinstance(first, str) else field.upper()
    return field.upper()


def load(settings_class: type[SettingsT], **overrides: object) -> SettingsT:
    """Read one part's settings, or raise :class:`ConfigError` with one readable line."""
    try:
        return settings_class(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = [str(p) for p in error.get("loc", ())]
            name = variable_for(settings_class, loc[0]) if loc else "settings"
            value = error.get("input")
            shown = "" if isinstance(value, dict) or name in _UNECHOED else f" (got {value!r})"
            message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
            if not loc:
                problems.append(message)
            else:
                problems.append(f"{name} is invalid{shown}: {message}")
        raise ConfigError("; ".join(problems)) from None
