"""Slack's answers, judged for the shared retry logic (``core.failures.PostFailure``).

The rule, on every platform: only an answer in which Slack itself says the call can never
succeed (:data:`FINAL_ERRORS`: the channel is gone, the bot is not in it, the token is
revoked, ...) gives up at once. Anything else is retried within the caller's budget: an
``ok: false`` code not known to be final, a 5xx whose body is HTML, text, empty or cut off
(what Slack's edge answers during an outage), a timeout, a reset connection, and any
unexpected exception.

slack-sdk hands such answers over in several shapes: ``SlackApiError.response`` is an
``AsyncSlackResponse`` whose ``data`` is a dict, a string or None, or (for a body that is
cut-off JSON) aiohttp's raw response; a text body can even make the SDK's own validation
raise ``AttributeError``. :func:`error_code` and :func:`http_status` read every shape.
"""

from __future__ import annotations

from typing import Any

from core.failures import PostFailure

#: The longest ``Retry-After`` honoured (seconds).
MAX_RETRY_AFTER = 30.0
#: ``ok: false`` codes that say the call can never succeed as made: retrying cannot help.
#: (Slack's Web API method pages, "Errors"; a code not listed here is retried.)
FINAL_ERRORS = frozenset(
    {
        # the channel or thread
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "channel_is_archived",
        "cannot_reply_to_message",
        "message_not_found",
        "cant_update_message",
        "edit_window_closed",
        "restricted_action",
        "restricted_action_read_only_channel",
        "restricted_action_thread_only_channel",
        "restricted_action_non_threadable_channel",
        "team_access_not_granted",
        "ekm_access_denied",
        # the token or the workspace
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "no_permission",
        "missing_scope",
        "not_allowed_token_type",
        "org_login_required",
        "team_not_found",
        "enterprise_is_restricted",
        # the request itself (the same request fails the same way again)
        "invalid_arguments",
        "invalid_arg_name",
        "invalid_form_data",
        "invalid_post_type",
        "missing_post_type",
        "invalid_charset",
        "msg_too_long",
        "no_text",
        "too_many_attachments",
        "invalid_blocks",
        "invalid_blocks_format",
        "msg_blocks_too_long",
        "method_deprecated",
        "deprecated_endpoint",
        "unknown_method",
    }
)


def _response(exc: BaseException) -> Any:
    return getattr(exc, "response", None)


def http_status(exc: BaseException) -> int | None:
    """The HTTP status of Slack's answer, whatever shape slack-sdk gave it, or None."""
    response = _response(exc)
    for name in ("status_code", "status"):
        value = getattr(response, name, None)
        if isinstance(value, int):
            return value
    return None


def error_code(exc: BaseException) -> str | None:
    """The ``error`` of an ``ok: false`` JSON answer; None when the body was no such JSON."""
    data = getattr(_response(exc), "data", None)
    if isinstance(data, dict):
        code = data.get("error")
        if isinstance(code, str) and code:
            return code[:80]
    return None


def _retry_after(exc: BaseException) -> float:
    headers = getattr(_response(exc), "headers", None) or {}
    try:
        lowered = {str(k).lower(): v for k, v in dict(headers).items()}
        seconds = float(lowered.get("retry-after", 1))
    except (TypeError, ValueError):
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_RETRY_AFTER)


def describe_error(exc: BaseException) -> str:
    """A log-safe description: the HTTP status and Slack error code, never request data."""
    status, code = http_status(exc), error_code(exc)
    if status is None and code is None:
        return type(exc).__name__
    parts = [f"HTTP {status}" if status is not None else "", code or "no Slack error code"]
    return " ".join(p for p in parts if p)


def classify_error(exc: BaseException) -> PostFailure:
    """Slack's answer as the shared delivery logic needs it: final (Slack said so), or worth
    another try, and how long Slack asked to wait (``Retry-After`` of a 429)."""
    reason = describe_error(exc)
    code = error_code(exc)
    if http_status(exc) == 429 or code == "ratelimited":
        return PostFailure(reason, True, _retry_after(exc))
    return PostFailure(reason, code not in FINAL_ERRORS)
