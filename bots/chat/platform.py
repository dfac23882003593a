"""The contract every chat platform fills: one class per platform, and what it is given.

A platform is one package under ``bots/`` (``bots/slack``, ``bots/feishu``,
``bots/dingtalk``) whose ``platform.py`` subclasses :class:`ChatPlatform`; the registry
(``bots.platforms``) lists them, and ``fathom serve``, ``fathom worker``, readiness and
shutdown iterate over the enabled ones without naming any. A platform only translates
(errbot's ``Backend``, bolt's adapters): inbound deliveries become
:class:`~bots.chat.message.ChatMessage` for the shared
:class:`~bots.chat.inbound.ChatCommands`, and a run's progress and report become the
platform's calls through its :class:`~bots.chat.delivery.ThreadPosters` (a
:class:`~bots.chat.delivery.ThreadPoster` per run; the rest of a delivery is the shared
:class:`~bots.chat.delivery.ChatDelivery`'s).

The life of a platform in one process (``bots.composition`` drives it):

- ``ChatPlatform(settings, services)``: nothing is opened yet;
- :meth:`open`: its outbound clients and what it serves (:class:`OpenPlatform`): its
  posters, registered on the research job (``serve`` and ``worker``), and, given the job
  runner (``serve`` only), its :class:`Ingress`, the adapter that receives requests (and
  answers them through the chat layer). From then on the server talks to the ingress: its
  ``handle`` answers the platform's HTTP :attr:`routes`, its ``connect`` / ``disconnect``
  hold the long-lived connection, if :attr:`long_lived`, on the replica that holds the
  platform's election (``core.operations.duty.OneHolder``), its ``status`` is what
  ``/readyz`` shows, and its ``close`` at shutdown, before the job runner stops, stops
  taking requests and finishes the answers in flight (then the chat layers the platform was
  given close: :meth:`PlatformServices.aclose`);
- :meth:`~ChatPlatform.readiness`: why it cannot serve at all (its credentials refused),
  which makes ``/readyz`` not ready;
- :meth:`aclose` once the runner has stopped (its running jobs post through the outbound
  clients during their grace period).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Generic, Protocol, TypeVar

from bots.chat.settings import ChatPolicy, PlatformSettings, RouteLimits

if TYPE_CHECKING:
    from sqlalchemy import MetaData
    from sqlalchemy.ext.asyncio import AsyncEngine
    from starlette.requests import Request
    from starlette.responses import Response

    from bots.chat.delivery import ThreadPosters
    from bots.chat.inbound import ChatCommands, InternalSources
    from bots.chat.replies import Markup
    from core.chat.stores import ChatStores
    from core.metrics import Metrics
    from core.operations.digests import DigestService
    from core.operations.runners import JobRunner
    from core.research.requests import RunRequests

SettingsT = TypeVar("SettingsT", bound=PlatformSettings)


@dataclass(frozen=True)
class PlatformRoute:
    """An HTTP route a platform adds to ``fathom serve`` (answered by its ``handle``)."""

    path: str
    methods: tuple[str, ...] = ("POST",)


@dataclass(frozen=True)
class Chore:
    """A platform's part of housekeeping (``bots.housekeeping``: hourly, on one replica)."""

    #: What it prunes, for the log line (``expired Slack OAuth states``).
    what: str
    #: Does it once; how many rows it removed.
    run: Callable[[], Awaitable[int]]


@dataclass(frozen=True)
class OpenPlatform:
    """What an opened platform serves: its outbound side, and what receives its requests
    (None in ``fathom worker``, or for a platform that receives none)."""

    posters: ThreadPosters
    ingress: Ingress | None = None


@dataclass(frozen=True)
class PlatformServices:
    """What every platform is given: the shared services, the chat policy, route limits."""

    requests: RunRequests
    store: ChatStores
    digests: DigestService
    policy: ChatPolicy
    limits: RouteLimits
    #: The internal sources (MCP servers, ``FATHOM_MCP_CONFIG``); None: the web only.
    knowledge: InternalSources | None = None
    #: The database's engine, given only to a platform with tables of its own
    #: (:attr:`ChatPlatform.metadata`), for those tables.
    engine: AsyncEngine | None = None
    #: Where the platform's API calls made for runs are counted (``fathom serve`` and a
    #: worker with ``--metrics-port``); None: not counted.
    metrics: Metrics | None = None
    #: The chat layers made by :meth:`commands`, closed by :meth:`aclose`.
    _made: list[ChatCommands] = field(default_factory=list, init=False, repr=False)

    def commands(
        self, runner: JobRunner, markup: Markup, posters: ThreadPosters | None = None
    ) -> ChatCommands:
        """The shared chat layer, answering in ``markup``, submitting to ``runner``; with the
        platform's ``posters``, a research accepted while it waits in line gets its progress
        message at once (``bots.chat.announce``). Finished by :meth:`aclose`."""
        from bots.chat.announce import QueueAnnouncer
        from bots.chat.inbound import ChatCommands

        chat = ChatCommands(
            self.policy,
            self.requests,
            self.store,
            runner,
            markup,
            self.digests,
            knowledge=self.knowledge,
            announcer=QueueAnnouncer(posters, self.store) if posters is not None else None,
        )
        self._made.append(chat)
        return chat

    async def aclose(self) -> None:
        """Finish what the chat layers made here are announcing (once the platform's ingress
        stopped taking requests, before the job runner stops)."""
        made, self._made[:] = list(self._made), []
        for chat in made:
            await chat.aclose()


class Ingress(Protocol):
    """What receives a platform's requests in ``fathom serve`` (its adapter)."""

    async def handle(self, request: Request) -> Response:
        """Answer one of the platform's routes."""
        ...

    async def connect(self) -> None:
        """Open the long-lived connection."""
        ...

    async def disconnect(self) -> None:
        """Close the long-lived connection (idempotent)."""
        ...

    def status(self) -> dict[str, object]:
        """What ``/readyz`` shows for the platform."""
        ...

    async def close(self) -> None:
        """Stop taking requests and finish the answers in flight."""
        ...


class HttpIngress(ABC):
    """An :class:`Ingress` that takes requests on its routes only (no long-lived connection,
    nothing in flight to finish): fill in :meth:`handle`."""

    @abstractmethod
    async def handle(self, request: Request) -> Response: ...

    async def connect(self) -> None:
        raise NotImplementedError("requests arrive on the HTTP routes only")

    async def disconnect(self) -> None:  # noqa: B027 - nothing to close
        """Nothing to close."""

    def status(self) -> dict[str, object]:
        return {"mode": "http"}

    async def close(self) -> None:  # noqa: B027 - nothing in flight
        """Nothing in flight."""


class ChatPlatform(ABC, Generic[SettingsT]):
    """One chat platform in ``fathom serve`` and ``fathom worker``: what a platform must say.

    A platform fills in :meth:`open` (its posters and, given a runner, its ingress); the
    routes' answers, the connection, the status and the shutdown are its ingress's.
    """

    #: The first part of its thread keys (``slack:T1:C1:1712.5``) and of its routes; given by
    #: its registry line (``bots.platforms.PlatformEntry.load``).
    name: ClassVar[str]
    #: What people call it (in answers and errors); given by its registry line.
    title: ClassVar[str]
    #: Its settings (read from the same environment as every other part's).
    settings_class: ClassVar[type[PlatformSettings]]
    #: Its HTTP routes; served (404 while it is not configured) by its ingress's ``handle``.
    routes: ClassVar[tuple[PlatformRoute, ...]] = ()
    #: Its own tables, if it keeps any (Slack's OAuth installs), for schema comparisons; their
    #: migration is in ``migrations/versions`` with the others. A platform with tables is
    #: given the engine (:attr:`PlatformServices.engine`); the others are not.
    metadata: ClassVar[MetaData | None] = None

    def __init__(self, settings: SettingsT, services: PlatformServices) -> None:
        self.settings = settings
        self.services = services

    @classmethod
    def secret_patterns(cls) -> tuple[str, ...]:
        """Regular expressions of this platform's credentials (its tokens, a token in its API
        URLs): every log line masks them, in every process, whether the platform is enabled
        or not (``core.logs.Redactor``)."""
        return ()

    def housekeeping(self) -> tuple[Chore, ...]:
        """What this platform prunes of its own state in housekeeping (its tables, say)."""
        return ()

    @classmethod
    async def kept_of(cls, engine: AsyncEngine, user_id: str) -> str | None:
        """What this platform keeps in its own tables of the person ``user_id`` (its id on
        this platform) that ``fathom forget`` does not delete, in one line; None: nothing."""
        return None

    @abstractmethod
    async def open(self, runner: JobRunner | None) -> OpenPlatform:
        """Open the outbound clients: this platform's posters and, when ``runner`` is given
        (``fathom serve``), what receives its requests, their runs going to ``runner`` (its
        chat layer: ``self.services.commands(runner, markup, posters)``)."""

    @property
    def mode(self) -> str:
        """How requests arrive (``http``, ``socket``, ``ws``, ``stream``...), for ``/readyz``
        while it has no ingress."""
        return "http"

    @property
    def long_lived(self) -> bool:
        """Whether requests arrive over a connection one replica holds (its ingress's
        ``connect``)."""
        return False

    async def readiness(self) -> str | None:
        """Why this platform cannot serve in this process at all, in one line (None: it can),
        asked at each ``/readyz``: a platform whose own service refused its credentials makes
        the process not ready before any research runs. Cheap (what it checks is kept and
        asked again at a pace), and never raises. A connection that is down is not such a
        reason: its ingress's ``status`` shows it."""
        return None

    async def aclose(self) -> None:
        """Close the outbound clients (after the job runner has stopped)."""
