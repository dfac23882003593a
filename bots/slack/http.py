"""Slack's HTTP routes: the shared gate (size, signature, shape), then Bolt.

Bolt builds its request (decoding and parsing the body, reading the timestamp) before it
checks the signature, so a hostile body would reach parsers unauthenticated. Here the raw
bytes are size-checked and their signature verified first (``v0:{timestamp}:{body}``,
HMAC-SHA256 with the signing secret, a 5-minute window); only a signed body is decoded and
parsed, and a signed body that is not a Slack payload gets 400. A verified delivery that no
listener handles is acknowledged with 200 (Slack would retry a 404), and so is one whose ids
(as Bolt reads them to find the workspace's installation) no platform sends
(``bots.chat.ids``): dropped, or, for a slash command, told its id is not valid.

Bolt gets the payload parsed here, not the raw body: its own parser drops every form body
that merely contains the word "payload" (``/research payload design`` became ``{}``). Bolt
takes a parsed body only in its Socket Mode form, which also skips its own signature check;
the check above has already run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from slack_bolt.adapter.starlette.async_handler import to_starlette_response
from slack_bolt.async_app import AsyncApp, AsyncBoltRequest
from slack_bolt.context.async_context import AsyncBoltContext
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bots.chat.ids import InvalidId, check_ids, log_refused
from bots.http_gate import (
    DEFAULT_BODY_TIMEOUT,
    Rejected,
    parse_json,
    read_body,
    rejected_response,
)
from bots.slack.signature import signature_is_valid
from core.chat.commands import invalid_id

log = logging.getLogger(__name__)


def parse_payload(text: str, content_type: str | None) -> dict[str, Any]:
    """The payload as Bolt will read it; :class:`Rejected` (400) unless it is an object and
    the parts Fathom and Bolt look into have the right shape."""
    try:
        if content_type == "application/json" or text.startswith("{"):
            payload = parse_json(text)
        else:
            form = dict(parse_qsl(text, keep_blank_values=True))
            payload = parse_json(form["payload"]) if "payload" in form else form
    except ValueError:
        raise Rejected(400, "malformed Slack payload") from None
    if not isinstance(payload, dict):
        raise Rejected(400, "malformed Slack payload")
    names = ("event", "team", "enterprise", "user", "channel", "view", "message", "container")
    for name in names:
        value = payload.get(name)
        if value is not None and not isinstance(value, dict | str):
            raise Rejected(400, f"malformed Slack payload ({name})")
    if payload.get("type") == "event_callback" and not isinstance(payload.get("event"), dict):
        raise Rejected(400, "malformed Slack payload (event)")
    actions = payload.get("actions")
    if actions is not None and not (
        isinstance(actions, list) and all(isinstance(a, dict) for a in actions)
    ):
        raise Rejected(400, "malformed Slack payload (actions)")
    authorizations = payload.get("authorizations")
    if authorizations is not None and not (
        isinstance(authorizations, list) and all(isinstance(a, dict) for a in authorizations)
    ):
        raise Rejected(400, "malformed Slack payload (authorizations)")
    return payload


def _check_bolt_ids(context: AsyncBoltContext) -> None:
    """The ids Bolt read from a delivery (its workspace, user, channel, thread; a Slack
    Connect delivery's actor too), by the rule every platform id follows (``bots.chat.ids``)."""
    check_ids(
        enterprise=context.enterprise_id,
        team=context.team_id,
        user=context.user_id,
        channel=context.channel_id,
        thread=context.thread_ts,
        actor_enterprise=context.actor_enterprise_id,
        actor_team=context.actor_team_id,
        actor_user=context.actor_user_id,
    )


def _refused(payload: dict[str, Any], refused: InvalidId) -> Response:
    """A verified delivery with an id no platform sends: a 200, since Slack retries anything
    else; a slash command is told its id is not valid (Slack shows the answer), an event or
    a press is dropped."""
    if "command" in payload:
        log_refused("slack", refused, "answered")
        text = str(invalid_id(refused.name.replace("_", " ")))
        return JSONResponse({"response_type": "ephemeral", "text": text})
    log_refused("slack", refused, "dropped")
    return Response(status_code=200)


class SlackEndpoint:
    """``POST /slack/events`` and the OAuth ``GET`` routes, behind the gate."""

    def __init__(
        self,
        app: AsyncApp,
        *,
        signing_secret: str | None,
        max_body_bytes: int,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._app = app
        self._secret = signing_secret or ""
        self._limit = max_body_bytes
        self._body_timeout = body_timeout
        self._clock = clock

    async def __call__(self, request: Request) -> Response:
        try:
            body = await read_body(request, self._limit, self._body_timeout)
            if request.method == "POST":
                return await self._dispatch(request, body)
            return await self._oauth(request, body)
        except Rejected as rejection:
            return rejected_response(request, rejection)

    async def _dispatch(self, request: Request, body: bytes) -> Response:
        headers = request.headers
        signed = signature_is_valid(
            self._secret,
            body,
            headers.get("x-slack-request-timestamp"),
            headers.get("x-slack-signature"),
            self._clock(),
        )
        if not signed:
            raise Rejected(401, "invalid or missing Slack signature")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise Rejected(400, "body is not UTF-8") from None
        content_type = (headers.get("content-type") or "").split(";")[0].strip().lower()
        payload = parse_payload(text, content_type or None)
        try:
            bolt_request = AsyncBoltRequest(
                body=payload,
                query=request.url.query,
                headers=dict(headers.items()),
                mode="socket_mode",  # a parsed, verified body (see the module docstring)
            )
        except Exception:
            raise Rejected(400, "malformed Slack payload") from None
        try:
            # Bolt looks the workspace up (an installation, in a multi-workspace app) before
            # any listener translates the delivery: the ids it read are checked first.
            _check_bolt_ids(bolt_request.context)
        except InvalidId as refused:
            return _refused(payload, refused)
        try:
            response = await self._app.async_dispatch(bolt_request)
        except Exception as exc:  # Bolt's matching chokes on a shape it did not expect
            log.warning("slack: Bolt could not dispatch a delivery (%s)", type(exc).__name__)
            log.debug("slack dispatch error", exc_info=exc)
            raise Rejected(400, "malformed Slack payload") from None
        if response.status == 404:  # verified, but nothing Fathom acts on: acknowledge it
            return Response(status_code=200)
        return to_starlette_response(response)

    async def _oauth(self, request: Request, body: bytes) -> Response:
        flow = self._app.oauth_flow
        if flow is None:
            raise Rejected(404, "Slack OAuth is not configured on this server")
        # A GET's body means nothing here (Bolt would parse it, and choke on e.g. "null").
        bolt_request = AsyncBoltRequest(
            body="", query=request.url.query, headers=dict(request.headers.items())
        )
        if request.url.path == flow.install_path:
            return to_starlette_response(await flow.handle_installation(bolt_request))
        if request.url.path == flow.redirect_uri_path:
            return to_starlette_response(await flow.handle_callback(bolt_request))
        raise Rejected(404, "not found")
