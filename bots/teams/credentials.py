"""Whether the Microsoft identity platform gives the bot its token, for ``/readyz``.

Every post to Teams carries a token the identity platform issues for ``TEAMS_APP_ID`` and
``TEAMS_APP_PASSWORD``. A wrong secret (its ID pasted instead of its value) or an expired
one is answered ``401 invalid_client`` ("AADSTS7000215: Invalid client secret provided");
then every progress card and report would fail, after the research had spent its searches
and tokens. So the token is fetched when the platform opens and whenever ``/readyz`` asks
(:meth:`CredentialsCheck.problem`), and a refusal makes the process not ready, before any
research runs.

Asking costs nothing while the bot holds a valid token (``TeamsApi.token`` keeps it until
five minutes before it expires). After a refusal or a failure the identity platform is asked
again at most every :data:`RECHECK_AFTER` seconds: a secret just added can take minutes to be
accepted, and a probe every few seconds must not become a request every few seconds. A
failure that says nothing about the credentials (the network, a 5xx page) does not make the
bot unready: it is shown, and the runs retry as they do for any post.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from bots.teams.api import TeamsApi, TeamsError

log = logging.getLogger(__name__)

#: Seconds between two questions to the identity platform while the bot has no token.
RECHECK_AFTER = 60.0


def refusal_line(error: TeamsError) -> str:
    """The identity platform's refusal in one line (its trace and correlation ids left out)."""
    said = error.message.split(" Trace ID:", 1)[0].strip()
    return f"the identity platform refuses the bot's token ({error.code}: {said})"


class CredentialsCheck:
    """The bot's token asked for at a pace; what ``/readyz`` says of it."""

    def __init__(
        self,
        api: TeamsApi,
        *,
        recheck_after: float = RECHECK_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._every = recheck_after
        self._clock = clock
        self._asked_at: float | None = None
        self._error: str | None = None  # the last failure that said nothing of the credentials
        self._said: str | None = None  # the refusal last logged
        self._lock = asyncio.Lock()

    async def problem(self) -> str | None:
        """Why the bot cannot post (its token refused), or None; asks the identity platform
        when it is due (see the module's docstring). Never raises."""
        async with self._lock:
            api = self._api
            failing = api.refused is not None or self._error is not None
            since = None if self._asked_at is None else self._clock() - self._asked_at
            if not failing or since is None or since >= self._every:
                self._asked_at = self._clock()
                try:
                    await api.token()
                except Exception as exc:  # the refusal is kept by the API; the rest shown
                    self._error = None if api.refused is not None else _one_line(exc)
                else:
                    self._error = None
            refused = refusal_line(api.refused) if api.refused is not None else None
            if refused != self._said:
                self._said = refused
                if refused is not None:
                    log.error("teams: %s; /readyz is not ready and no post can be made", refused)
                else:
                    log.info("teams: the identity platform gives the bot its token")
            return refused

    def status(self) -> dict[str, object]:
        """The credentials' state as ``/readyz`` shows it."""
        if self._api.refused is not None:
            return {"credentials": "refused"}
        if self._api.has_token:
            return {"credentials": "accepted"}
        if self._error is not None:
            return {"credentials": "not checked", "credentials_error": self._error}
        return {"credentials": "not checked"}


def _one_line(error: Exception) -> str:
    return " ".join(f"{type(error).__name__}: {error}".split())[:200]
