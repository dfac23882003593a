"""The DingTalk OpenAPI calls Fathom makes, with the project's async HTTP client (httpx).

The ``dingtalk-stream`` SDK's helpers block the event loop (``requests``), read their endpoint
once at import, and swallow refusals (a card that was never created still gets an id). So the
few calls Fathom needs are made here, against ``DINGTALK_API_URL``: the access token (cached
until five minutes before it expires, fetched again when DingTalk says it is invalid), card
instances (create-and-deliver, update), the robot's group and one-to-one sends, posts to
a message's session webhook, and the exchange of a received file's ``downloadCode``. Every
failure becomes a :class:`DingTalkError`; nothing retries here (``bots.chat.throttle`` and
``core.operations.job`` own retries).
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx

from bots.chat.errors import PlatformError

#: Renew the access token this long before DingTalk says it expires (seconds).
TOKEN_MARGIN = 300.0
#: Session-webhook error codes that mean "too many messages": wait and retry.
WEBHOOK_THROTTLED = frozenset({130101, 130102, 410100})
#: Session-webhook error codes of a transient failure.
WEBHOOK_BUSY = frozenset({-1, 88})
#: How DingTalk's codes begin when it says a call can never succeed as made: a missing
#: permission, bad credentials, a parameter it refuses (a robot or conversation that does not
#: exist). Any other answer is retried.
FINAL_CODE_PREFIXES = (
    "Forbidden",
    "InvalidAuthentication",
    "invalidClient",
    "invalidParameter",
    "MissingParameter",
    "param.",
    "resource.not.found",
    "robot.not.exist",
)
#: The session webhook's codes of a refusal for good (keywords, signature, IP allow-list).
WEBHOOK_FINAL = frozenset({310000, 400101, 400102, 400105, 400106})


class DingTalkError(PlatformError):
    """A refused or failed call: HTTP ``status`` and DingTalk's ``code``; ``final`` when
    DingTalk's own answer says this call can never succeed."""

    code: str

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        retry_after: float = 0.0,
        *,
        final: bool = False,
        answered: bool = False,
    ) -> None:
        self.answered = answered  # the body was DingTalk's own JSON answer with a code
        super().__init__(
            status,
            code,
            message,
            retry_after,
            final=final,
            shown=f"{message} ({code}, HTTP {status})",
        )

    @property
    def rate_limited(self) -> bool:
        return self.status == 429 or "throttl" in self.code.lower()

    @property
    def forbidden(self) -> bool:
        """The app lacks a permission (a console setting, not a transient failure)."""
        return self.status == 403 or self.code.startswith("Forbidden")


def _retry_after(response: httpx.Response) -> float:
    try:
        return float(response.headers.get("retry-after", "0"))
    except ValueError:
        return 0.0


def _error(response: httpx.Response) -> DingTalkError:
    """The failure of a call; ``final`` only when the body is DingTalk's own JSON answer with
    a code that says so (an HTML, empty or cut-off body is a proxy's or an outage's)."""
    try:
        data = response.json()
    except ValueError:
        data = {}
    data = data if isinstance(data, dict) else {}
    own = data.get("code") or data.get("errcode")
    code = str(own or response.status_code)
    message = str(data.get("message") or data.get("errmsg") or response.reason_phrase)[:300]
    final = (
        own is not None
        and response.status_code < 500
        and (response.status_code in (401, 403) or code.startswith(FINAL_CODE_PREFIXES))
    )
    return DingTalkError(
        response.status_code,
        code,
        message,
        _retry_after(response),
        final=final,
        answered=own is not None,
    )


class DingTalkApi:
    """The app's OpenAPI client (AppKey/AppSecret); ``robot_code`` sends as the app's robot."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        client_id: str,
        client_secret: str,
        api_url: str,
        robot_code: str | None = None,
    ) -> None:
        self._http = http
        self._client_id = client_id
        self._client_secret = client_secret
        self._api = api_url.rstrip("/")
        self.robot_code = robot_code or client_id
        self._token: str | None = None
        self._expires_at = 0.0
        self._lock = asyncio.Lock()

    async def _access_token(self) -> str:
        async with self._lock:
            if self._token is not None and time.monotonic() < self._expires_at:
                return self._token
            response = await self._http.post(
                f"{self._api}/v1.0/oauth2/accessToken",
                json={"appKey": self._client_id, "appSecret": self._client_secret},
            )
            if response.status_code != 200:
                raise _error(response)
            data = response.json()
            token = str(data.get("accessToken") or "")
            if not token:
                raise DingTalkError(response.status_code, "noAccessToken", "no accessToken")
            expire = float(data.get("expireIn") or 7200)
            self._token, self._expires_at = token, time.monotonic() + expire - TOKEN_MARGIN
            return token

    async def _call(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """One OpenAPI call with the access token, fetched again once when it was refused."""
        for attempt in (1, 2):
            headers = {"x-acs-dingtalk-access-token": await self._access_token()}
            response = await self._http.request(
                method, f"{self._api}{path}", json=body, headers=headers
            )
            if response.status_code == 401 and attempt == 1:
                async with self._lock:
                    self._token = None
                continue
            if response.status_code >= 300:
                raise _error(response)
            try:
                data = response.json()
            except ValueError:
                return {}
            return data if isinstance(data, dict) else {}
        raise AssertionError("unreachable")

    # -- cards ------------------------------------------------------------------------------
    async def create_card(
        self,
        *,
        out_track_id: str,
        template_id: str,
        params: dict[str, str],
        space: Space,
        callback_route: str | None = None,
    ) -> None:
        """Create a card instance and deliver it to the conversation (one call). Presses on
        its buttons come back over the stream, or (``callback_route``) to the HTTP address
        registered under that key (:meth:`register_card_callback`)."""
        route = {"callbackType": "HTTP", "callbackRouteKey": callback_route}
        body: dict[str, Any] = {
            "cardTemplateId": template_id,
            "outTrackId": out_track_id,
            "cardData": {"cardParamMap": params},
            **(route if callback_route else {"callbackType": "STREAM"}),
            "imGroupOpenSpaceModel": {"supportForward": True},
            "imRobotOpenSpaceModel": {"supportForward": True},
            "userIdType": 1,
            **space.card_target(self.robot_code),
        }
        await self._call("POST", "/v1.0/card/instances/createAndDeliver", body)

    async def update_card(self, out_track_id: str, params: dict[str, str]) -> None:
        body = {
            "outTrackId": out_track_id,
            "cardData": {"cardParamMap": params},
            "cardUpdateOptions": {"updateCardDataByKey": True},
        }
        await self._call("PUT", "/v1.0/card/instances", body)

    async def register_card_callback(self, route_key: str, url: str, api_secret: str) -> None:
        """Where DingTalk sends presses on cards created with ``route_key`` (its "register
        the card callback address" API; ``forceUpdate``: every replica registers the same)."""
        body = {
            "callbackRouteKey": route_key,
            "callbackUrl": url,
            "apiSecret": api_secret,
            "forceUpdate": True,
        }
        await self._call("POST", "/v1.0/card/callbacks/register", body)

    # -- files -------------------------------------------------------------------------------
    async def message_file_url(self, download_code: str) -> str:
        """The temporary download address of a file a user sent the robot: its message's
        ``downloadCode`` exchanged through ``POST /v1.0/robot/messageFiles/download`` (with
        this robot's code: DingTalk's "download the file content of the robot receiving
        message" API; permission ``qyapi_robot_sendmsg``)."""
        body = {"downloadCode": download_code, "robotCode": self.robot_code}
        data = await self._call("POST", "/v1.0/robot/messageFiles/download", body)
        url = data.get("downloadUrl")
        if not isinstance(url, str) or not url:
            raise DingTalkError(200, "noDownloadUrl", "the answer has no downloadUrl")
        return url

    def stream(self, url: str) -> AbstractAsyncContextManager[httpx.Response]:
        """A plain GET of ``url`` streamed (no access token, no redirects followed): for a
        file's temporary address on DingTalk's storage, which carries its own signature (and
        refuses a request whose headers it did not sign, e.g. a ``Content-Type``)."""
        return self._http.stream("GET", url, follow_redirects=False)

    @property
    def api_url(self) -> str:
        return self._api

    # -- messages ----------------------------------------------------------------------------
    async def send_markdown(self, space: Space, title: str, text: str) -> None:
        """A Markdown message through the robot OpenAPI (no session webhook needed)."""
        param = json.dumps({"title": title, "text": text}, ensure_ascii=False)
        body: dict[str, Any]
        if space.group:
            body = {
                "robotCode": self.robot_code,
                "openConversationId": space.conversation_id,
                "msgKey": "sampleMarkdown",
                "msgParam": param,
            }
            await self._call("POST", "/v1.0/robot/groupMessages/send", body)
        else:
            body = {
                "robotCode": self.robot_code,
                "userIds": [space.staff_id],
                "msgKey": "sampleMarkdown",
                "msgParam": param,
            }
            await self._call("POST", "/v1.0/robot/oToMessages/batchSend", body)

    async def post_webhook(self, url: str, body: dict[str, Any]) -> None:
        """Post to a message's session webhook (it carries its own authorisation)."""
        response = await self._http.post(url, json=body)
        if response.status_code >= 300:
            raise _error(response)
        try:
            data = response.json()
        except ValueError:
            data = {}
        data = data if isinstance(data, dict) else {}
        try:
            code = int(data.get("errcode") or 0)
        except (TypeError, ValueError):
            code = -1  # an answer that is no DingTalk answer: not known to be posted
        if code:
            status = 429 if code in WEBHOOK_THROTTLED else 503 if code in WEBHOOK_BUSY else 400
            message = str(data.get("errmsg") or "refused")[:300]
            raise DingTalkError(
                status,
                str(code),
                message,
                2.0 if status == 429 else 0.0,
                final=code in WEBHOOK_FINAL,
            )


class Space:
    """Where a run's messages go: a group conversation, or a one-to-one chat with a user."""

    def __init__(self, *, group: bool, conversation_id: str, staff_id: str) -> None:
        self.group = group
        self.conversation_id = conversation_id
        self.staff_id = staff_id

    def card_target(self, robot_code: str) -> dict[str, Any]:
        if self.group:
            return {
                "openSpaceId": f"dtv1.card//IM_GROUP.{self.conversation_id}",
                "imGroupOpenDeliverModel": {"robotCode": robot_code},
            }
        return {
            "openSpaceId": f"dtv1.card//IM_ROBOT.{self.staff_id}",
            "imRobotOpenDeliverModel": {"spaceType": "IM_ROBOT"},
        }
