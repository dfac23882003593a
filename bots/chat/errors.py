"""A platform API's refusal, and the one way a failed call is judged for every platform.

Each platform's client raises a subclass of :class:`PlatformError` for an answer that says a
call failed (its status, the platform's own code and message, how long it asked us to wait,
and whether its own answer says the call can never succeed); :func:`judge_failure` turns any
exception of a post into the :class:`~core.failures.PostFailure` the delivery step acts on.
"""

from __future__ import annotations

import httpx

from core.failures import PostFailure


class PlatformError(Exception):
    """A refused or failed API call: HTTP ``status``, the platform's ``code`` and message;
    ``shown`` is how the error reads in a log line (default: the message)."""

    code: object

    def __init__(
        self,
        status: int,
        code: object,
        message: str,
        retry_after: float = 0.0,
        *,
        final: bool = False,
        shown: str | None = None,
    ) -> None:
        super().__init__(shown or message)
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        self.final = final  # the platform's own answer says this call can never succeed

    @property
    def rate_limited(self) -> bool:
        """The platform asked us to slow down (wait :attr:`retry_after`, then try again)."""
        return self.status == 429


def judge_failure(error: Exception, platform: str, *, rate_limit_wait: float) -> PostFailure:
    """Rate-limited (wait as the platform says, else ``rate_limit_wait`` seconds), final (the
    platform's own answer says the call can never succeed: :attr:`PlatformError.final`), or
    worth another try: any other code, a 5xx or a body that was no answer of the platform
    (HTML, empty, cut off), the network, any other exception."""
    if isinstance(error, PlatformError):
        if error.rate_limited:
            wait = error.retry_after or rate_limit_wait
            return PostFailure(f"{platform}: rate limited", True, wait)
        reason = f"{platform} {error.code}: {error.message[:120]}"
        return PostFailure(reason, not error.final)
    if isinstance(error, (httpx.TransportError, OSError, TimeoutError)):
        return PostFailure(f"{platform} unreachable ({type(error).__name__})", True)
    return PostFailure(f"{type(error).__name__}: {str(error)[:120]}", True)
