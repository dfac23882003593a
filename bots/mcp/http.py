"""``/mcp`` in ``fathom serve``: the research tool over MCP's Streamable HTTP, behind a token.

Served only when ``FATHOM_MCP_TOKEN`` names a token or ``FATHOM_MCP_SLACK_IDENTITY`` is on
(404 otherwise, like an unconfigured platform's routes). Each request is checked in this
order, before its body is read or any work is done:

1. ``Authorization: Bearer <token>``: a token of ``FATHOM_MCP_TOKEN``, compared in constant
   time with every configured one; none, or a wrong one, is 401 with
   ``WWW-Authenticate: Bearer`` (counted in ``fathom_ingress_refused_total``), unless Slack
   identity is on and the request carries ``X-Slack-Signature``: then its body, once read
   (below), must be signed with the Slack app's signing secret within five minutes
   (``bots.slack.signature``, injected as :data:`SlackSigned`), else 401. Slack's requests
   are served by a stateless session manager, each its caller the Slack user its
   ``_meta.slack`` names (:func:`caller_of`, ``bots.mcp.callers``);
2. ``Origin``, when present, must be one of ``FATHOM_MCP_ALLOWED_ORIGINS``: 403 otherwise
   (the specification's transport security warning: "If the Origin header is present and
   invalid, servers MUST respond with HTTP 403 Forbidden");
3. ``Host`` must be one of ``FATHOM_MCP_ALLOWED_HOSTS``: 421 Misdirected Request otherwise,
   as the SDK's own check (``mcp.server.transport_security``) answers it;

then its body is read within ``FATHOM_MAX_BODY_BYTES`` and ``FATHOM_BODY_TIMEOUT`` (413 and
408, as on a platform route: ``bots.http_gate``), and the SDK's Streamable HTTP session
manager (``mcp.server.streamable_http_manager``) serves it, the token's principal attached
to the request as the SDK's authenticated user: the manager binds each session to the
principal that opened it (another token's request for that session is answered 404, as for
a session that does not exist), and the tool reads it back with :func:`principal_of`. The
manager runs inside ``serve``'s lifespan and stops before the job runner: a tool call in
flight at shutdown ends, its run goes on and is stored.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from bots.http_gate import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_MAX_BODY_BYTES,
    Rejected,
    read_body,
    rejected_response,
)
from bots.mcp.callers import Caller, UnknownCaller, slack_caller
from bots.mcp.settings import McpSettings

if TYPE_CHECKING:
    from mcp.server.lowlevel.server import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    from bots.composition import App

log = logging.getLogger(__name__)

#: The route's path.
PATH = "/mcp"
#: Its methods: POST (messages), GET (the server's stream), DELETE (ending a session).
METHODS = ("POST", "GET", "DELETE")
#: Set on a request's ASGI scope when Slack signed it (:func:`caller_of`).
_SLACK = "fathom.mcp.slack"
#: The session principal of every request Slack signs (its callers are in each request).
SLACK_SESSIONS = "slack"

#: Slack's signature check of a request (``bots.slack.signature``, bound to the signing
#: secret and the clock): the raw body, ``X-Slack-Request-Timestamp``, ``X-Slack-Signature``.
SlackSigned = Callable[[bytes, str | None, str | None], bool]


def research_server(app: App) -> Server[Any]:
    """The research tool's MCP server on ``app``'s runtime and job runner
    (``bots.mcp.server.build_server``), each call's principal its token's."""
    from bots.mcp.server import build_server

    return build_server(app)


def caller_of(request: object | None, params: Mapping[str, Any] | None) -> Caller:
    """The caller of the request whose HTTP request is ``request`` and whose params are
    ``params`` (an MCP handler's ``ctx.request`` and ``ctx.params``): for a request Slack
    signed, the Slack user its ``_meta.slack`` names (``UnknownCaller`` when it names none);
    else its token's principal."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and scope.get(_SLACK) is True:
        return slack_caller(params)
    return Caller.principal(principal_of(request))


def principal_of(request: object | None) -> str:
    """The principal of the call whose HTTP request is ``request`` (an MCP handler's
    ``ctx.request``): its token's, set by :class:`McpEndpoint`; :class:`UnknownCaller` without
    one (never served: every request ``/mcp`` serves has its caller)."""
    scope = getattr(request, "scope", None)
    user = scope.get("user") if isinstance(scope, dict) else None
    access = getattr(user, "access_token", None)
    principal = getattr(access, "client_id", None)
    if not (isinstance(principal, str) and principal):
        raise UnknownCaller("this request names no caller")
    return principal


class McpEndpoint:
    """The ASGI app at ``/mcp``: the checks of the module, then the SDK's session manager
    (while :meth:`running`)."""

    def __init__(
        self,
        settings: McpSettings | None,
        *,
        admin_port: int | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        slack_signed: SlackSigned | None = None,
    ) -> None:
        self._settings = settings
        self._slack_signed = slack_signed if settings and settings.slack_identity else None
        self._admin_port = admin_port
        self._max_body_bytes = max_body_bytes
        self._body_timeout = body_timeout
        tokens = settings.tokens if settings is not None else []
        self._tokens = [(each.token.encode(), each.principal) for each in tokens]
        self._manager: StreamableHTTPSessionManager | None = None
        self._signed_manager: StreamableHTTPSessionManager | None = None

    @property
    def enabled(self) -> bool:
        """Whether a token is configured (else every request is 404)."""
        return self._settings is not None and self._settings.enabled

    @contextlib.asynccontextmanager
    async def serving(self, app: App) -> AsyncIterator[None]:
        """Serve the research tool on ``app`` for the time of the block when :attr:`enabled`
        (the server from :func:`research_server`), else nothing."""
        if not self.enabled:
            yield
            return
        async with self.running(research_server(app)):
            yield

    @contextlib.asynccontextmanager
    async def running(self, server: Server[Any]) -> AsyncIterator[None]:
        """Serve ``server`` at ``/mcp`` for the time of the block."""
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        # Origin and Host are checked here, before the manager: its own check is off. Slack's
        # signed requests go to a stateless manager (each request whole, as Slack's sample
        # server serves them), whatever Slack's client does with session ids.
        manager = StreamableHTTPSessionManager(
            app=server, security_settings=None, max_request_body_size=self._max_body_bytes
        )
        signed = StreamableHTTPSessionManager(
            app=server,
            security_settings=None,
            max_request_body_size=self._max_body_bytes,
            stateless=True,
        )
        async with manager.run(), signed.run():
            self._manager, self._signed_manager = manager, signed
            try:
                yield
            finally:
                self._manager = self._signed_manager = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        manager, signed = self._manager, self._signed_manager
        assert manager is not None and signed is not None  # (a refusal otherwise)
        request = Request(scope, receive)
        try:  # as a platform route's (bots.http_gate): 413 or 408 before the SDK parses it
            body = await read_body(request, self._max_body_bytes, self._body_timeout)
        except Rejected as rejection:
            await rejected_response(request, rejection)(scope, receive, send)
            return
        if scope.get("user") is None:  # no token: Slack's signature, or nothing
            if not self._slack_signature(request, body):
                await self._refused(scope, 401, "a valid bearer token is required")(
                    scope, receive, send
                )
                return
            scope["user"] = _user(SLACK_SESSIONS)
            scope[_SLACK] = True
            manager = signed
        await manager.handle_request(scope, _replaying(body, receive), send)

    def _slack_signature(self, request: Request, body: bytes) -> bool:
        """Whether Slack signed ``request`` (with Slack identity on)."""
        check = self._slack_signed
        headers = request.headers
        return check is not None and check(
            body, headers.get("x-slack-request-timestamp"), headers.get("x-slack-signature")
        )

    def _refusal(self, scope: Scope) -> Response | None:
        """The answer to a request that is not served, else None (with its principal set on
        ``scope``)."""
        server = scope.get("server")
        if self._admin_port is not None and server is not None and server[1] == self._admin_port:
            return JSONResponse({"error": "not found"}, 404)
        settings = self._settings
        if settings is None or not settings.enabled:
            return JSONResponse({"error": "MCP is not configured on this server"}, 404)
        app = scope.get("app")
        ready = getattr(getattr(app, "state", None), "schema_ready", True)
        if self._manager is None or not ready:
            return JSONResponse({"error": "the MCP server is starting or stopping"}, 503)
        headers = Headers(scope=scope)
        principal = self._principal(headers.get("authorization"))
        if principal is None and not (self._slack_signed and "x-slack-signature" in headers):
            return self._refused(scope, 401, "a valid bearer token is required")
        origin = headers.get("origin")
        if origin is not None and not _allowed(origin, settings.allowed_origins):
            return self._refused(scope, 403, "this Origin is not allowed")
        host = headers.get("host")
        if "*" not in settings.allowed_hosts and (
            host is None or not _allowed(host, settings.allowed_hosts)
        ):
            return self._refused(scope, 421, "this Host is not served")
        # A request with Slack's signature instead is checked once its body is read.
        scope["user"] = _user(principal) if principal is not None else None
        return None

    def _principal(self, authorization: str | None) -> str | None:
        """The principal whose token ``authorization`` carries (every configured token is
        compared, in constant time), or None."""
        scheme, _, credential = (authorization or "").partition(" ")
        given = credential.strip().encode() if scheme.lower() == "bearer" else b""
        found = None
        for token, principal in self._tokens:
            if hmac.compare_digest(given, token) and given:
                found = principal
        return found

    @staticmethod
    def _refused(scope: Scope, status: int, reason: str) -> Response:
        client = scope.get("client")
        log.info(
            "%s %s from %s refused: %d %s",
            scope.get("method"),
            PATH,
            client[0] if client else "-",
            status,
            reason,
        )
        headers = {"WWW-Authenticate": 'Bearer realm="fathom"'} if status == 401 else None
        return JSONResponse({"error": reason}, status, headers=headers)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` whose first message is the whole ``body``, already read."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def _allowed(value: str, allowed: list[str]) -> bool:
    """``value`` (an Origin or Host) is listed, or matches a listed ``name:*`` on any port."""
    for each in allowed:
        if value == each:
            return True
        if each.endswith(":*") and value.startswith(each[:-1]) and value[len(each) - 1 :].isdigit():
            return True
    return False


def _user(principal: str) -> Any:
    """The SDK's authenticated user for ``principal`` (the session manager binds sessions to
    its ``client_id``); the token itself is not kept on the request."""
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
    from mcp.server.auth.provider import AccessToken

    return AuthenticatedUser(AccessToken(token="-", client_id=principal, scopes=[]))
