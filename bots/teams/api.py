"""The Bot Connector REST API as Fathom calls it (httpx), and the bot's token for it.

Calls ("Bot Framework REST API reference", Conversations): send an activity to a
conversation (a channel's reply chain is the conversation ``<channel>;messageid=<root>``),
update and delete one, and create a conversation (a new post in a channel, for a digest).
Each carries ``Authorization: Bearer <token>``, a token the Microsoft identity platform
issues for the app's id and password (client credentials, scope
``https://api.botframework.com/.default``), kept until five minutes before it expires and
fetched again after a 401.

A refusal is a :class:`TeamsError` with Teams' own code (``{"error": {"code", "message"}}``;
an HTML or empty body keeps the status only). It is final when Teams' own answer says the
call can never succeed as sent (400 a bad activity, 403 the bot removed or blocked, 404 the
conversation or activity gone, 413 too large), or the identity platform refuses the app
(``invalid_client``: a wrong or expired secret; ``unauthorized_client``; ``invalid_scope``);
the same statuses with an HTML or empty page (a proxy, an outage), 401 (a token just
revoked), 412, 429 (with its ``Retry-After``, seconds or a date) and 5xx are worth another
try (``bots.chat.errors.judge_failure``).

Files a person sends in a personal chat are read from their ``downloadUrl``, which is
pre-authenticated: it is fetched without the bot's token.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

import httpx

from bots.chat.errors import PlatformError
from core.documents.attachments import AttachmentRefused, AttachmentTooLarge
from core.words.reasons import Reason

SCOPE = "https://api.botframework.com/.default"
#: Seconds before a token's expiry when it is fetched again.
TOKEN_MARGIN = 300.0
#: Seconds a file's download may take in all (a host that trickles it does not hold the run).
DOWNLOAD_TIMEOUT = 120.0
#: Bytes of an error page read (to find Teams' error code in it).
MAX_ERROR_BYTES = 64 * 1024
#: Statuses whose answer (in Teams' own error JSON) says the call can never succeed as sent.
FINAL_STATUSES = frozenset({400, 403, 404, 413})
#: The identity platform's answers that no retry changes: a wrong or expired secret, an app
#: id the tenant does not know, a scope refused.
FINAL_TOKEN_ERRORS = frozenset({"invalid_client", "unauthorized_client", "invalid_scope"})
#: Teams' answers that the bot cannot post in the conversation any more, whatever it sends
#: (msteams-docs conversation-messages.md, "Status code responses": "Stop posting to
#: conversation ..."): the bot removed from it (403), blocked there by the user or disabled
#: by the tenant's admin (403), the conversation gone (404).
GONE_CODES = frozenset(
    {
        "BotNotInConversationRoster",
        "ConversationBlockedByUser",
        "BotDisabledByAdmin",
        "ConversationNotFound",
    }
)


class TeamsError(PlatformError):
    """A refused Bot Connector or token call."""

    @property
    def bot_gone(self) -> bool:
        """Teams said, in its own words, that the bot cannot post in the conversation any
        more (:data:`GONE_CODES`)."""
        return self.final and self.code in GONE_CODES


def _error_of(response: httpx.Response) -> TeamsError:
    code: object = response.status_code
    message = response.reason_phrase or "error"
    try:
        body = json.loads(response.content) if response.content else None
    except ValueError:
        body = None
    said = False  # Teams (or the identity platform) answered in its own words
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            code = error.get("code") or code
            message = str(error.get("message") or message)
            said = True
        elif isinstance(error, str):  # the token endpoint's OAuth error
            code = error
            message = str(body.get("error_description") or message)
            said = True
    status = response.status_code
    # An HTML or empty page (a proxy, an outage) says nothing final, whatever its status.
    final = said and (status in FINAL_STATUSES or code in FINAL_TOKEN_ERRORS)
    return TeamsError(
        status,
        code,
        message[:300],
        _retry_after(response.headers.get("retry-after", "")),
        final=final,
        shown=f"teams {status} {code}: {message[:200]}",
    )


def _retry_after(header: str) -> float:
    """Seconds to wait from a ``Retry-After`` header: seconds, or an HTTP date (at most 600;
    0 when absent or unreadable)."""
    header = header.strip()
    if not header:
        return 0.0
    try:
        seconds = float(header)
    except ValueError:
        try:
            when = parsedate_to_datetime(header)
        except (TypeError, ValueError):
            return 0.0
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return max(0.0, min(seconds, 600.0))


class TeamsApi:
    """The bot's calls to the Bot Connector (``service_url``: the one Teams named for the
    conversation) and its token."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        app_id: str,
        app_password: str,
        token_url: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.http = http
        self._app_id = app_id
        self._app_password = app_password
        self._token_url = token_url
        self._clock = clock
        self._token: tuple[str, float] | None = None
        self._lock = asyncio.Lock()
        #: The identity platform's last answer when it refused the app's id and password
        #: for good (``invalid_client``: a wrong or expired secret); None once a token came.
        self.refused: TeamsError | None = None

    @property
    def has_token(self) -> bool:
        """Whether a token is kept and not due for renewal (asking for it costs nothing)."""
        return self._token is not None and self._clock() < self._token[1]

    async def token(self) -> str:
        async with self._lock:
            if self._token is not None and self._clock() < self._token[1]:
                return self._token[0]
            response = await self.http.post(
                self._token_url,
                data={
                    "grant_type": "client_credentials",
                    "client_id": self._app_id,
                    "client_secret": self._app_password,
                    "scope": SCOPE,
                },
            )
            if response.status_code != 200:
                error = _error_of(response)
                if error.final:
                    self.refused = error
                raise error
            try:
                body = response.json()
                token = str(body["access_token"])
                expires_in = float(body.get("expires_in") or 3599)
            except (ValueError, KeyError, TypeError):
                raise TeamsError(
                    response.status_code, "bad_token_answer", "the token answer has no token"
                ) from None
            self._token = (token, self._clock() + max(expires_in - TOKEN_MARGIN, 30.0))
            self.refused = None
            return token

    async def _call(
        self, method: str, url: str, body: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        token = await self.token()
        response = await self.http.request(
            method, url, json=body, headers={"Authorization": f"Bearer {token}"}
        )
        if response.status_code == 401:
            self._token = None  # revoked or rolled: the next call fetches a new one
        if response.status_code >= 300:
            raise _error_of(response)
        if not response.content:
            return {}
        try:
            value = response.json()
        except ValueError:
            return {}
        return value if isinstance(value, dict) else {}

    @staticmethod
    def _conversation_url(service_url: str, conversation: str) -> str:
        return f"{service_url.rstrip('/')}/v3/conversations/{quote(conversation, safe='')}"

    @classmethod
    def _activity_url(cls, service_url: str, conversation: str, activity_id: str) -> str:
        base = cls._conversation_url(service_url, conversation)
        return f"{base}/activities/{quote(activity_id, safe='')}"

    async def send(self, service_url: str, conversation: str, activity: dict[str, Any]) -> str:
        """Post ``activity`` in ``conversation``; its id, or "" when Teams took it without
        saying which message it made: ``202 Accepted`` with no body, or an empty ``id``.

        Teams answers so when it splits an activity into several messages (text and a card:
        "Message splitting", msteams-docs' conversation-messages.md;
        OfficeDev/BotBuilder-MicrosoftTeams#125), and MicrosoftDocs/bot-docs#2263 reports it
        for a plain send too. The message is posted: asking again would post it again."""
        url = self._conversation_url(service_url, conversation) + "/activities"
        answer = await self._call("POST", url, activity)
        posted = answer.get("id")
        return posted if isinstance(posted, str) else ""

    async def update(
        self, service_url: str, conversation: str, activity_id: str, activity: dict[str, Any]
    ) -> None:
        url = self._activity_url(service_url, conversation, activity_id)
        await self._call("PUT", url, {**activity, "id": activity_id})

    async def delete(self, service_url: str, conversation: str, activity_id: str) -> None:
        url = self._activity_url(service_url, conversation, activity_id)
        await self._call("DELETE", url)

    async def create_channel_post(
        self, service_url: str, channel: str, tenant: str, activity: dict[str, Any]
    ) -> str:
        """A new post in ``channel`` (a new reply chain); the post's id."""
        body: dict[str, Any] = {
            "isGroup": True,
            "channelData": {"channel": {"id": channel}, "tenant": {"id": tenant}},
            "activity": activity,
        }
        if tenant:
            body["tenantId"] = tenant
        answer = await self._call("POST", f"{service_url.rstrip('/')}/v3/conversations", body)
        posted = str(answer.get("activityId") or "")
        if not posted:
            conversation = str(answer.get("id") or "")
            posted = (
                conversation.split(";messageid=", 1)[1] if ";messageid=" in conversation else ""
            )
        if not posted:
            raise TeamsError(201, "no_activity_id", "Teams did not say which post it created")
        return posted

    async def download(self, url: str, max_bytes: int) -> bytes:
        """A file from its pre-authenticated ``downloadUrl`` (no token sent), at most
        ``max_bytes``."""
        async with (
            asyncio.timeout(DOWNLOAD_TIMEOUT),
            self.http.stream("GET", url, follow_redirects=True) as response,
        ):
            status = response.status_code
            if status in (401, 403, 404, 410):  # the link expired, or the file is gone
                raise AttachmentRefused(
                    Reason(
                        f"Teams no longer gives this file (HTTP {status})",
                        f"Teams 不再提供这个文件（HTTP {status}）",
                    )
                )
            if status != 200:
                head = bytearray()
                async for chunk in response.aiter_bytes():
                    head += chunk
                    if len(head) > MAX_ERROR_BYTES:
                        break
                kept = {k: v for k, v in response.headers.items() if k.lower() == "retry-after"}
                answer = httpx.Response(status, headers=kept, content=bytes(head))
                raise _error_of(answer)
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > max_bytes:
                raise AttachmentTooLarge.past(max_bytes)
            data = bytearray()
            async for chunk in response.aiter_bytes():
                data += chunk
                if len(data) > max_bytes:
                    raise AttachmentTooLarge.past(max_bytes)
            return bytes(data)
