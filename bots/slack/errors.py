"""Slack's answers, judged for the shared retry logic (``core.delivery.PostFailure``)."""

from __future__ import annotations

import aiohttp
from slack_sdk.errors import SlackApiError

from core.delivery import PostFailure

#: The longest ``Retry-After`` honoured (seconds).
MAX_RETRY_AFTER = 30.0
#: ``ok: false`` errors that mean "Slack had a problem, try again" (HTTP 200 answers).
RETRYABLE_ERRORS = frozenset(
    {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
)


def describe_error(exc: BaseException) -> str:
    """A log-safe description: the HTTP status and Slack error code, never request data."""
    if isinstance(exc, SlackApiError):
        return f"HTTP {exc.response.status_code} {exc.response.get('error')}"
    return type(exc).__name__


def classify_error(exc: BaseException) -> PostFailure:
    """Slack's answer as the shared delivery logic needs it: retryable or not, and how long
    Slack asked to wait (``Retry-After`` of a 429)."""
    reason = describe_error(exc)
    if isinstance(exc, SlackApiError):
        status = exc.response.status_code
        if status == 429:
            headers = {str(k).lower(): v for k, v in (exc.response.headers or {}).items()}
            try:
                seconds = float(headers.get("retry-after", 1))
            except (TypeError, ValueError):
                seconds = 1.0
            return PostFailure(reason, True, min(max(seconds, 0.0), MAX_RETRY_AFTER))
        retryable = status >= 500 or exc.response.get("error") in RETRYABLE_ERRORS
        return PostFailure(reason, retryable)
    if isinstance(exc, aiohttp.ClientError | TimeoutError | OSError):
        return PostFailure(reason, True)
    return PostFailure(reason, False)
