"""The contract every chat platform fills: one class per platform, and what it is given.

A platform is one package under ``bots/`` (``bots/slack``, ``bots/feishu``,
``bots/dingtalk``) whose ``platform.py`` subclasses :class:`ChatPlatform`; the registry
(``bots.platforms``) lists them, and ``fathom serve``, ``fathom worker``, readiness and
shutdown iterate over the enabled ones without naming any. A platform only translates
(errbot's ``Backend``, bolt's adapters): inbound deliveries become
:class:`~bots.chat.inbound.ChatMessage` for the shared
:class:`~bots.chat.inbound.ChatCommands`, and a run's progress and report become the
platform's calls through its :class:`~core.delivery.DeliveryFactory`.

The life of a platform in one process (``bots.composition`` drives it):

- ``ChatPlatform(settings, services)``: nothing is opened yet;
- :meth:`open_delivery` (``serve`` and ``worker``): its outbound clients and the delivery of
  its runs, registered on the research job;
- :meth:`open_ingress` (``serve`` only): what receives requests (answers them through the
  chat layer); its HTTP :attr:`routes` are then served by :meth:`handle`;
- :meth:`connect` / :meth:`disconnect`: its long-lived connection, if :attr:`long_lived`,
  opened only on the replica that holds the platform's election (``core.duty.OneHolder``);
- :meth:`status`: what ``/readyz`` shows for it;
- :meth:`close_ingress` at shutdown, before the job runner stops (stop taking requests,
  finish the answers in flight), then :meth:`aclose` once the runner has stopped (its
  running jobs post through the outbound clients during their grace period).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, TypeVar

from starlette.responses import JSONResponse

from bots.chat.settings import ChatPolicy, PlatformSettings, RouteLimits

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

    from bots.chat.inbound import ChatCommands
    from bots.chat.replies import Markup
    from core.delivery import DeliveryFactory
    from core.digests import DigestService
    from core.jobs import JobRunner
    from core.service import ResearchService
    from storage import Database, Store

SettingsT = TypeVar("SettingsT", bound=PlatformSettings)


@dataclass(frozen=True)
class PlatformRoute:
    """An HTTP route a platform adds to ``fathom serve`` (answered by its ``handle``)."""

    path: str
    methods: tuple[str, ...] = ("POST",)


@dataclass(frozen=True)
class PlatformServices:
    """What every platform is given: the shared services, the chat policy, route limits."""

    service: ResearchService
    store: Store
    digests: DigestService
    #: The database, for a platform that keeps tables of its own (Slack's OAuth install).
    database: Database
    policy: ChatPolicy
    limits: RouteLimits

    def commands(self, runner: JobRunner, markup: Markup) -> ChatCommands:
        """The shared chat layer, answering in ``markup``, submitting to ``runner``."""
        from bots.chat.inbound import ChatCommands

        return ChatCommands(self.policy, self.service, self.store, runner, markup, self.digests)


class ChatPlatform(ABC, Generic[SettingsT]):
    """One chat platform in ``fathom serve`` and ``fathom worker``."""

    #: The first part of its thread keys (``slack:T1:C1:1712.5``) and of its routes.
    name: ClassVar[str]
    #: What people call it (in answers and errors).
    title: ClassVar[str]
    #: Its settings (read from the same environment as every other part's).
    settings_class: ClassVar[type[PlatformSettings]]
    #: Its HTTP routes; served (404 while it is not configured) by :meth:`handle`.
    routes: ClassVar[tuple[PlatformRoute, ...]] = ()

    def __init__(self, settings: SettingsT, services: PlatformServices) -> None:
        self.settings = settings
        self.services = services

    @abstractmethod
    async def open_delivery(self) -> DeliveryFactory:
        """Open the outbound clients; the delivery of this platform's runs."""

    async def open_ingress(self, runner: JobRunner) -> None:
        """Get ready to receive requests (``fathom serve``); runs go to ``runner``."""

    async def handle(self, request: Request) -> Response:
        """Answer one of :attr:`routes` (the server checked the schema and the platform is
        configured)."""
        return JSONResponse({"error": "not found"}, 404)

    @property
    def mode(self) -> str:
        """How requests arrive (``http``, ``socket``, ``ws``, ``stream``...), for ``/readyz``."""
        return "http"

    @property
    def long_lived(self) -> bool:
        """Whether requests arrive over a connection one replica holds (:meth:`connect`)."""
        return False

    async def connect(self) -> None:
        """Open the long-lived connection (on the replica holding the election)."""
        raise NotImplementedError(f"{self.name} has no long-lived connection")

    async def disconnect(self) -> None:
        """Close the long-lived connection (idempotent)."""

    def status(self) -> dict[str, object]:
        """What ``/readyz`` shows for this platform."""
        return {"mode": self.mode}

    async def close_ingress(self) -> None:
        """Stop taking requests and finish the answers in flight (before the runner stops)."""
        await self.disconnect()

    async def aclose(self) -> None:
        """Close the outbound clients (after the job runner has stopped)."""
