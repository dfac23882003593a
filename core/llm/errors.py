"""What a failed model call is: its kind and a short message safe to show people."""

from __future__ import annotations

from enum import StrEnum
from urllib.parse import urlsplit, urlunsplit

#: How much of an unparseable answer an error keeps (for logs and ``--json``).
RAW_LIMIT = 2000


class FailureKind(StrEnum):
    """What went wrong with a model call, for a one-line reason a person can act on."""

    UNREACHABLE = "unreachable"
    #: The connection broke off after the request was sent (a body cut mid-way, a reset).
    DISCONNECTED = "disconnected"
    TIMEOUT = "timeout"
    AUTH = "auth"
    PERMISSION = "permission"
    NOT_FOUND = "not_found"
    RATE_LIMITED = "rate_limited"
    SERVER = "server"
    BAD_ANSWER = "bad_answer"
    OTHER = "other"


class LLMError(Exception):
    """The endpoint failed after retries; the message is short and safe to show users.

    ``detail`` is the reason alone (no model name), ``model`` and ``endpoint`` say which model
    failed where (the endpoint without credentials or query), ``kind`` what kind of failure,
    ``said`` only the outside words in the reason (an HTTP status and the server's message, a
    host that could not be reached: what a Chinese run shows after its own words for
    ``kind``)."""

    def __init__(
        self,
        message: str,
        *,
        kind: FailureKind = FailureKind.OTHER,
        model: str = "",
        endpoint: str = "",
        detail: str | None = None,
        said: str = "",
    ) -> None:
        super().__init__(message)
        self.said = said
        self.kind = kind
        self.model = model
        self.endpoint = endpoint
        self.detail = detail if detail is not None else message


class LLMInvalidJSON(LLMError):
    """The model twice answered something that is not valid JSON for the schema."""

    def __init__(
        self, message: str, raw: str, *, model: str = "", endpoint: str = "", said: str = ""
    ) -> None:
        super().__init__(
            message, kind=FailureKind.BAD_ANSWER, model=model, endpoint=endpoint, said=said
        )
        self.raw = raw[:RAW_LIMIT]


def public_endpoint(url: str) -> str:
    """``url`` as it may be shown: scheme, host, port and path; no user, password or query."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return "an invalid URL"
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/"), "", ""))
