"""Logging set-up: human-readable lines or one JSON object per line (``FATHOM_LOG_FORMAT``).

Every line says which run and thread it is about when it is written inside
:func:`log_context` (a research job binds ``run_id`` and ``thread``). JSON lines are rendered
by structlog's ``ProcessorFormatter`` over the standard library's records, imported only when
JSON is asked for (the CLI does not pay for it). Things that look like credentials are masked
in every line, in both formats.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

# Things that look like credentials are masked in every log line.
# Slack tokens, OpenAI-style keys, bearer headers, Feishu/Lark access tokens (t-/u-/a-…).
_SECRETS = re.compile(
    r"(xox[abposr]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+|sk-[A-Za-z0-9_-]{8,}|Bearer\s+[^\s\"']+"
    r"|\b[tua]-[A-Za-z0-9_]{24,})"
)


def redact(text: str) -> str:
    return _SECRETS.sub(lambda m: m.group(0)[:5] + "…", text)


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


def _redact_values(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact(value)
    return event


def json_formatter() -> logging.Formatter:
    """One JSON object per line: time, level, logger, message, the context, exception."""
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
            _redact_values,
            structlog.processors.JSONRenderer(ensure_ascii=False),
        ],
    )


class _RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = _CONTEXT.get()
        if context:
            line += " [" + " ".join(f"{k}={v}" for k, v in context) + "]"
        return redact(line)


def configure_logging(level: str = "INFO", fmt: str = "console") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(json_formatter())
    else:
        handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Client libraries that log a line per HTTP request (the openai SDK's own copy of httpx
    # is httpx2): about three quarters of a worker's log at INFO, and each names a URL.
    for noisy in ("httpx", "httpcore", "httpx2", "httpcore2", "openai", "primp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
