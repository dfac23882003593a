"""The ``mcp`` platform's delivery: a run asked for over MCP shows its progress as rows of
``mcp_progress``, whichever process executes it.

A run from MCP may execute in another process than the one holding the caller's connection
(a ``fathom worker`` with ``FATHOM_QUEUE=procrastinate``), so its delivery posts nothing
anywhere: each state of its progress (:func:`render_progress`: the status line, e.g.
``1/3th search executed.``, ``Checking citations…``, ``Writing the report…``, then the plan's
steps, one a line) is appended as the run's next row (``ChatProgress.append``), and the final
status is a row too. The report has no parts: the caller's request handler reads it from the
run (``bots.mcp.follow``). Every state is written (no coalescing: a row is cheap, and the
protocol's progress notifications are the point); the same content twice in a row is written
once.

:class:`McpPosters` is the platform's ``core.operations.job.DeliveryFactory``, registered on
the research job under :data:`PLATFORM` in every process that runs jobs (``fathom serve``,
``fathom worker``, ``fathom mcp``); it needs no credential. It is not a
``bots.chat.delivery.ThreadPosters``: that class's delivery coalesces progress edits, and an
MCP caller is shown each step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from core.chat.stores import ChatProgress, RunRecord
from core.documents.attachments import AttachmentRefused
from core.engine.progress import (
    ProgressEvent,
    ProgressKind,
    ProgressSink,
    ProgressTask,
    TaskStatus,
    final_tasks,
)
from core.failures import PostFailure
from core.models import Attachment
from core.research.outcome import RunOutcome
from core.untrusted import neutralise
from core.words.reasons import Reason

log = logging.getLogger(__name__)

#: The platform of runs asked for over MCP (the first part of their thread keys).
PLATFORM = "mcp"
#: What people call it (``core.operations.job``'s ``chat_platforms``).
TITLE = "MCP"

_MARKS = {
    TaskStatus.PENDING: "○",
    TaskStatus.IN_PROGRESS: "◐",
    TaskStatus.COMPLETE: "●",
    TaskStatus.ERROR: "✕",
}


def render_progress(status: str, tasks: Sequence[ProgressTask] = ()) -> str:
    """One state of a run's progress as the caller reads it: the status line, then each step
    of the plan on its own line with its mark (○ pending, ◐ going on, ● done, ✕ failed).
    The steps' titles come from a model: mention and link syntax is made inert."""
    lines = [status]
    lines += [f"{_MARKS.get(task.status, '○')} {neutralise(task.title)}" for task in tasks]
    return "\n".join(lines)


class Wakeup:
    """Tells the request handlers of this process that a run has a new progress row, so one
    following that run reads it at once rather than at its next poll (``bots.mcp.follow``)."""

    def __init__(self) -> None:
        self._listeners: dict[str, set[asyncio.Event]] = {}

    def listen(self, run_id: str, listener: asyncio.Event) -> None:
        """``listener`` is set at each new row of ``run_id``."""
        self._listeners.setdefault(run_id, set()).add(listener)

    def forget(self, run_id: str, listener: asyncio.Event) -> None:
        listeners = self._listeners.get(run_id)
        if listeners is not None:
            listeners.discard(listener)
            if not listeners:
                del self._listeners[run_id]

    def ring(self, run_id: str) -> None:
        for listener in tuple(self._listeners.get(run_id, ())):
            listener.set()


class McpDelivery:
    """``core.operations.job.Delivery`` of one MCP run: its progress as rows; it is its own
    progress sink."""

    def __init__(self, run: RunRecord, rows: ChatProgress, wakeup: Wakeup | None = None) -> None:
        self._run = run
        self._rows = rows
        self._wakeup = wakeup
        self._last: str | None = None
        #: The plan as the last event showed it (the final state shows its finished steps).
        self.tasks: tuple[ProgressTask, ...] = ()

    @property
    def progress(self) -> ProgressSink:
        return self

    async def publish(self, event: ProgressEvent) -> None:
        final = event.kind is ProgressKind.FINISHED
        if event.tasks or final:
            self.tasks = final_tasks(event.tasks or self.tasks) if final else event.tasks
        try:
            await self._write(render_progress(event.text, self.tasks))
        except Exception:  # progress must never break the research
            log.warning("progress of run %s not written", self._run.id, exc_info=True)

    async def _write(self, content: str) -> None:
        if content == self._last:
            return
        await self._rows.append(self._run.id, content)
        self._last = content
        if self._wakeup is not None:
            self._wakeup.ring(self._run.id)

    def report_parts(self, outcome: RunOutcome) -> Sequence[Any]:
        """None: the caller's request handler reads the report from the run."""
        return ()

    async def post_report_part(self, part: Any) -> None:
        """Nothing is posted (there are no parts)."""

    def claimed(self, run: RunRecord) -> None:
        """Nothing earlier attempts recorded matters here."""

    async def post_status(self, text: str) -> None:
        """The final status, as the run's last row (raises when it cannot be written: the job
        tries again)."""
        await self._write(render_progress(text, final_tasks(self.tasks)))

    async def post_notice(self, text: str) -> None:
        await self._write(text)

    async def download(self, attachment: Attachment, max_bytes: int) -> bytes:
        raise AttachmentRefused(Reason("files are not read over MCP", "通过 MCP 不读取文件"))

    def classify(self, error: Exception) -> PostFailure:
        """A row not written is the database's failure: worth another try."""
        return PostFailure(type(error).__name__, retryable=True)

    async def aclose(self) -> None:
        """Nothing runs for the run here."""


class McpPosters:
    """The ``mcp`` platform's ``core.operations.job.DeliveryFactory``: an
    :class:`McpDelivery` for each run, writing to ``rows``; ``wakeup`` tells this process's
    request handlers of each row written here."""

    def __init__(self, rows: ChatProgress, wakeup: Wakeup | None = None) -> None:
        self._rows = rows
        self.wakeup = wakeup or Wakeup()

    async def for_run(self, run: RunRecord) -> McpDelivery:
        return McpDelivery(run, self._rows, self.wakeup)
