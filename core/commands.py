"""Validation of research requests, shared by every adapter and the CLI.

Errors say what is wrong and what is allowed, so adapters can show them verbatim.
"""

from __future__ import annotations

from core.models import Strategy

MAX_TOPIC_CHARS = 2000
AVAILABLE_STRATEGIES = (Strategy.ITERATIVE,)


class CommandError(ValueError):
    """The request is invalid; the message is meant for the person who made it."""


def validate_topic(topic: str | None) -> str:
    text = " ".join((topic or "").split())
    if not text:
        raise CommandError("The topic is empty: say what to research, e.g. `AI chips depth=3`.")
    if len(text) > MAX_TOPIC_CHARS:
        raise CommandError(
            f"The topic is {len(text):,} characters long; at most {MAX_TOPIC_CHARS:,} are allowed."
        )
    return text


def validate_depth(value: int | str | None, *, default: int, maximum: int) -> int:
    if value is None or (isinstance(value, str) and not value.strip()):
        return default
    try:
        depth = int(str(value).strip())
    except ValueError:
        raise CommandError(
            f"depth must be a whole number from 1 to {maximum}, not {str(value)!r}."
        ) from None
    if not 1 <= depth <= maximum:
        raise CommandError(f"depth must be from 1 to {maximum}; {depth} is not allowed.")
    return depth


def validate_strategy(value: str | Strategy | None) -> Strategy:
    if value is None or (isinstance(value, str) and not value.strip()):
        return Strategy.ITERATIVE
    name = str(value).strip().lower()
    allowed = ", ".join(s.value for s in AVAILABLE_STRATEGIES)
    try:
        strategy = Strategy(name)
    except ValueError:
        raise CommandError(f"Unknown strategy {name!r}; available: {allowed}.") from None
    if strategy not in AVAILABLE_STRATEGIES:
        raise CommandError(f"The {name} strategy is not available yet; available: {allowed}.")
    return strategy
