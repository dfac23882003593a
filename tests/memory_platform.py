"""An in-memory chat platform for lifecycle tests: a ``core.delivery.DeliveryFactory`` whose
threads are lists, shared by every runner ("replica") of a test like one real chat service.

It implements the same ``Delivery`` interface as the Slack adapter (progress, report parts,
notice, error classification), so ``core.delivery.ResearchJob`` runs unchanged; posts can be
made to fail, transiently or for good, to exercise the delivery step's retries.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.delivery import PostFailure, Undeliverable
from core.progress import ProgressEvent, ProgressSink
from core.service import RunOutcome
from storage import RunRecord

PLATFORM = "memory"


class PlatformDown(Exception):
    """A transient failure (the platform's 5xx): worth retrying."""


class Refused(Exception):
    """A permanent failure (the platform's "not_in_channel"): retrying cannot help."""


@dataclass
class MemoryThread:
    progress: list[str] = field(default_factory=list)  # every text the progress message showed
    posts: list[str] = field(default_factory=list)  # report parts and notices, in order

    @property
    def notices(self) -> list[str]:
        return [p for p in self.posts if p.startswith("notice: ")]

    @property
    def parts(self) -> list[str]:
        return [p for p in self.posts if not p.startswith("notice: ")]


class MemoryPlatform:
    """Threads by run id; ``fail_posts`` makes the next report-part posts raise."""

    def __init__(self) -> None:
        self.threads: dict[str, MemoryThread] = defaultdict(MemoryThread)
        self.failures: list[Exception] = []
        self.refuse_for_run: str | None = None  # for_run raises Undeliverable for this run
        self.for_run_errors: list[Exception] = []  # the next for_run calls raise these
        self.post_latency = 0.0  # seconds each post takes (a post in flight can be interrupted)
        self.posting = asyncio.Event()  # set when a report part post has started

    def fail_posts(self, *errors: Exception) -> None:
        self.failures.extend(errors)

    async def for_run(self, run: RunRecord) -> MemoryDelivery:
        if self.for_run_errors:
            raise self.for_run_errors.pop(0)
        if run.id == self.refuse_for_run:
            raise Undeliverable("no installation for this workspace")
        return MemoryDelivery(self, run)


def split_sections(markdown: str) -> list[str]:
    """The report as parts: one per ``## `` section (the title with the first)."""
    return [p for p in re.split(r"\n(?=## )", markdown.strip()) if p.strip()]


class MemoryDelivery:
    def __init__(self, platform: MemoryPlatform, run: RunRecord) -> None:
        self._platform = platform
        self._thread = platform.threads[run.id]
        self.closed = False

    @property
    def progress(self) -> ProgressSink:
        return self

    async def publish(self, event: ProgressEvent) -> None:
        if not self.closed:
            self._thread.progress.append(event.text)

    def report_parts(self, outcome: RunOutcome) -> Sequence[str]:
        return split_sections(outcome.report_markdown or "")

    async def post_report_part(self, part: str) -> None:
        self._platform.posting.set()
        if self._platform.failures:
            raise self._platform.failures.pop(0)
        self._thread.posts.append(part)
        if self._platform.post_latency:  # the platform has it; its answer is on the way
            await asyncio.sleep(self._platform.post_latency)

    async def post_status(self, text: str) -> None:
        if self._platform.failures:
            raise self._platform.failures.pop(0)
        self._thread.progress.append(text)

    async def post_notice(self, text: str) -> None:
        self._thread.posts.append(f"notice: {text}")

    def classify(self, error: Exception) -> PostFailure:
        return PostFailure(f"{type(error).__name__}: {error}", isinstance(error, PlatformDown))

    async def aclose(self) -> None:
        self.closed = True
