"""Logging set-up: human-readable lines or one JSON object per line (``FATHOM_LOG_FORMAT``)."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime

# Things that look like credentials are masked in every log line.
# Slack tokens, OpenAI-style keys, bearer headers, Feishu/Lark access tokens (t-/u-/a-…).
_SECRETS = re.compile(
    r"(xox[abposr]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+|sk-[A-Za-z0-9_-]{8,}|Bearer\s+[^\s\"']+"
    r"|\b[tua]-[A-Za-z0-9_]{24,})"
)


def redact(text: str) -> str:
    return _SECRETS.sub(lambda m: m.group(0)[:5] + "…", text)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False)


class _RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def configure_logging(level: str = "INFO", fmt: str = "console") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("httpx", "httpcore", "openai", "primp"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
