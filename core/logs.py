"""Logging set-up: human-readable lines or one JSON object per line (``FATHOM_LOG_FORMAT``).

Every line says which run and thread it is about when it is written inside
:func:`log_context` (a research job binds ``run_id`` and ``thread``). JSON lines are rendered
by structlog's ``ProcessorFormatter`` over the standard library's records, imported only when
JSON is asked for (the CLI does not pay for it). Things that look like credentials are masked
in every line, in both formats: core's own and each chat platform's (``Redactor``).
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

#: Credentials of the clients core has (OpenAI-style keys, bearer headers); each chat platform
#: adds its own (``ChatPlatform.secret_patterns``: Slack's ``xoxb-`` tokens, ...).
CORE_SECRETS = (r"sk-[A-Za-z0-9_-]{8,}", r"Bearer\s+[^\s\"']+")


class Redactor:
    """Masks what looks like a credential in a log line: core's patterns and ``patterns``
    (regular expressions), each match cut to its first five characters and an ellipsis."""

    def __init__(self, patterns: Iterable[str] = ()) -> None:
        every = (*CORE_SECRETS, *patterns)
        self._secrets = re.compile("|".join(f"(?:{pattern})" for pattern in every))

    def __call__(self, text: str) -> str:
        return self._secrets.sub(lambda m: m.group(0)[:5] + "…", text)


#: Core's patterns alone (what a line is masked with when no platform's are known).
redact = Redactor()


class Changing:
    """A context value that may change while its context lasts (a run's thread key, which a
    Slack slash command's run learns once its opener is posted): the tasks started inside
    share it, so :func:`change_log_context` reaches every line logged from then on."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __str__(self) -> str:
        return self.value


_CONTEXT: ContextVar[tuple[tuple[str, str | Changing], ...]] = ContextVar(
    "fathom_log_context", default=()
)


@contextmanager
def log_context(**values: str | Changing) -> Iterator[None]:
    """Lines logged inside (in this task, and tasks it starts) carry ``values``."""
    token = _CONTEXT.set(tuple({**dict(_CONTEXT.get()), **values}.items()))
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def change_log_context(key: str, value: str) -> None:
    """From now on, lines of the enclosing :func:`log_context` carry ``value`` for ``key``
    (when that was given as :class:`Changing`; otherwise nothing changes)."""
    for name, current in _CONTEXT.get():
        if name == key and isinstance(current, Changing):
            current.value = value


def _add_context(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in _CONTEXT.get():
        event.setdefault(key, str(value))
    return event


def _redacting(
    redactor: Callable[[str], str],
) -> Callable[[Any, str, MutableMapping[str, Any]], MutableMapping[str, Any]]:
    """A structlog processor masking credentials in every string of the event."""

    def redact_values(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for key, value in event.items():
            if isinstance(value, str):
                event[key] = redactor(value)
        return event

    return redact_values


def json_formatter(redactor: Callable[[str], str] = redact) -> logging.Formatter:
    """One JSON object per line: time, level, logger, message, the context, exception;
    credentials masked by ``redactor``."""
    import structlog

    return structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="time"),
            structlog.stdlib.add_log_level,
            structlog.stdlib.add_logger_name,
            _add_context,
            structlog.processors.format_exc_info,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.EventRenamer("message"),
            _redacting(redactor),
            structlog.processors.JSONRenderer(ensure_ascii=False),
        ],
    )


class _RedactingFormatter(logging.Formatter):
    def __init__(self, fmt: str, redactor: Callable[[str], str]) -> None:
        super().__init__(fmt)
        self._redact = redactor

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = _CONTEXT.get()
        if context:
            line += " [" + " ".join(f"{k}={v}" for k, v in context) + "]"
        return self._redact(line)


def configure_logging(
    level: str = "INFO", fmt: str = "console", secret_patterns: Iterable[str] = ()
) -> None:
    """Log to stderr at ``level`` in ``fmt``, masking core's credentials and those matching
    ``secret_patterns`` (the chat platforms', ``bots.platforms.secret_patterns``)."""
    redactor = Redactor(secret_patterns)
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(json_formatter(redactor))
    else:
        line = "%(asctime)s %(levelname)s %(name)s: %(message)s"
        handler.setFormatter(_RedactingFormatter(line, redactor))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Client libraries that log a line per HTTP request (the openai SDK's own copy of httpx
    # is httpx2): about three quarters of a worker's log at INFO, and each names a URL.
    for noisy in ("httpx", "httpcore", "httpx2", "httpcore2", "openai", "primp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
