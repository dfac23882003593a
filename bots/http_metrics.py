"""Ingress requests counted by route and status (``fathom_ingress_requests_total``), those
whose platform signature or token was refused (401) apart (``fathom_ingress_refused_total``):
a flood of forged requests is not traffic, and a platform whose requests stop arriving or
start failing shows on its own route.

A plain ASGI middleware around the Starlette app: the route label is the path of a route the
app has (``/slack/events``, ``/readyz``...) or ``other``, never the raw path (whatever a
client sends would grow the series without bound). A request whose handler raises counts as
500, one whose client went away before an answer as 499.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

if TYPE_CHECKING:
    from core.metrics import Metrics

#: The status of a request whose signature (or token) was refused at the gate.
REFUSED = 401
#: Counted when the connection ended before any answer was sent.
NO_ANSWER = 499


class IngressMetrics:
    """Count each HTTP request by route and status in the metrics ``metrics()`` returns (None
    while the process is starting: not counted)."""

    def __init__(
        self, app: ASGIApp, *, paths: Collection[str], metrics: Callable[[], Metrics | None]
    ) -> None:
        self._app = app
        self._paths = frozenset(paths)
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        status = NO_ANSWER

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self._app(scope, receive, sending)
        except Exception:
            if status == NO_ANSWER:
                status = 500
            raise
        finally:
            self._count(str(scope.get("path", "")), status)

    def _count(self, path: str, status: int) -> None:
        metrics = self._metrics()
        if metrics is None:
            return
        route = path if path in self._paths else "other"
        if status == REFUSED:
            metrics.ingress_refused.labels(route).inc()
        else:
            metrics.ingress_requests.labels(route, str(status)).inc()
