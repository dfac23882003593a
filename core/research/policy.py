"""What the executor of runs is built from, besides its strategies and writer: the stores it
reads and writes runs through (:class:`RunStores`), how this process executes runs
(:class:`RunPolicy`: the settings), the clocks it tells the time on (:class:`Clocks`), and what
runs read besides search results (:class:`Reading`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol
from zoneinfo import ZoneInfo

from core.config import VERIFY_SECONDS
from core.dates import Clock, utcnow, zone
from core.engine.budget import RunBudget
from core.research.cost import Prices
from core.research.lease import LeaseTiming, runner_identity
from core.research.requests import UserQuota
from core.timer import MONOTONIC, Timer
from storage import ClaimStore, DigestStore, RunStore, ThreadStore

if TYPE_CHECKING:
    from core.engine.files import FileReader
    from core.pages.reader import PageReader
    from core.research.steps import InternalSources


class RunStores(Protocol):
    """The stores runs are executed through (``storage.Store`` has them all)."""

    @property
    def runs(self) -> RunStore: ...

    @property
    def claims(self) -> ClaimStore: ...

    @property
    def threads(self) -> ThreadStore: ...

    @property
    def digests(self) -> DigestStore: ...


@dataclass(frozen=True)
class RunPolicy:
    """How this process executes runs (each a setting; the defaults are the settings')."""

    #: Names this process's claims (None: host, pid and a random part: ``runner_identity``).
    owner: str | None = None
    #: The lease of a claimed run (FATHOM_STALE_RUN_AFTER).
    timing: LeaseTiming = field(default_factory=LeaseTiming)
    #: A run claimed this often without finishing fails (FATHOM_MAX_ATTEMPTS).
    max_attempts: int = 3
    #: The tokens and seconds a run's searching may take (FATHOM_MAX_RUN_TOKENS, _SECONDS).
    budget: RunBudget = field(default_factory=RunBudget)
    #: What one chat user may start per day (FATHOM_USER_DAILY_RUNS, _TOKENS): a chat run's
    #: share of its requester's day caps its budget, and grows while the day has room.
    quota: UserQuota = field(default_factory=UserQuota)
    #: The timezone of today's date in prompts and reports (FATHOM_TIMEZONE; a digest's
    #: firing: its digest's).
    timezone: str | ZoneInfo = "UTC"
    #: What model calls cost (FATHOM_PRICES; None: outcomes are not priced).
    prices: Prices | None = None
    #: How long the claim check of one report may take (FATHOM_VERIFY_SECONDS).
    verify_seconds: float = VERIFY_SECONDS

    def resolved(self) -> RunPolicy:
        """This policy with its owner named (the same name for every part built from it)."""
        if self.owner is not None:
            return self
        return replace(self, owner=runner_identity())

    @property
    def zone(self) -> ZoneInfo:
        """``timezone`` as a zone (a name is looked up)."""
        return self.timezone if isinstance(self.timezone, ZoneInfo) else zone(self.timezone)


@dataclass(frozen=True)
class Clocks:
    """The clocks runs tell the time on (tests pin them): ``now`` for today's date and the
    rows' times, ``monotonic`` for a run's time budget, ``timer`` for the claim check's
    deadline."""

    now: Clock = utcnow
    monotonic: Callable[[], float] = time.monotonic
    timer: Timer = MONOTONIC


@dataclass(frozen=True)
class Reading:
    """What runs read besides search results (each None: not read)."""

    #: The best result pages of every search (None: the snippets only).
    pages: PageReader | None = None
    #: The files attached to a run's request (None: they are noted as not read).
    files: FileReader | None = None
    #: The team's internal sources (MCP servers); which of them a run searches is decided
    #: from its own thread key when it executes (None: the web only).
    knowledge: InternalSources | None = None
