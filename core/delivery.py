"""The research job: execute a run and deliver its progress and report to its platform.

Platform adapters register a :class:`DeliveryFactory` under their platform name
(the first part of the thread key). The job itself is platform-neutral and is
what a job runner executes, in-process or on a queue worker.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from core.models import RunStatus, ThreadKey
from core.progress import NullProgress, ProgressSink
from core.service import ResearchService, RunOutcome
from storage import RunRecord, Store

log = logging.getLogger(__name__)


class Delivery(Protocol):
    """Where one run's progress and report go."""

    @property
    def progress(self) -> ProgressSink: ...

    async def post_report(self, outcome: RunOutcome) -> None: ...


class DeliveryFactory(Protocol):
    async def for_run(self, run: RunRecord) -> Delivery | None: ...


class ResearchJob:
    """``await job(run_id)``: run (or resume) it, then post its report exactly once."""

    def __init__(
        self,
        service: ResearchService,
        store: Store,
        factories: Mapping[str, DeliveryFactory] | None = None,
    ) -> None:
        self._service = service
        self._store = store
        self._factories = dict(factories or {})

    def register(self, platform: str, factory: DeliveryFactory) -> None:
        self._factories[platform] = factory

    async def __call__(self, run_id: str) -> None:
        run = await self._store.get_run(run_id)
        if run is None:
            log.warning("job for unknown run %s dropped", run_id)
            return
        delivery = await self._delivery(run)
        progress: ProgressSink = delivery.progress if delivery else NullProgress()
        outcome = await self._service.execute(run_id, progress)
        if delivery is None or outcome.status is not RunStatus.SUCCEEDED:
            return
        if not outcome.report_markdown or not await self._store.mark_report_posted(run_id):
            return
        try:
            await delivery.post_report(outcome)
        except BaseException:
            await self._store.unmark_report_posted(run_id)
            raise

    async def _delivery(self, run: RunRecord) -> Delivery | None:
        platform = ThreadKey.parse(run.thread_key).platform
        factory = self._factories.get(platform)
        if factory is None:
            return None
        try:
            return await factory.for_run(run)
        except Exception:
            log.exception("no delivery for run %s on %s; running without it", run.id, platform)
            return None
