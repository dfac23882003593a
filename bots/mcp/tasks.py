"""The research tool's runs as MCP tasks (protocol 2025-11-25, basic/utilities/tasks).

A task is a run: its id is the run's id, its state is read from the run's row and its
progress rows (so it is the same on every replica and survives a restart), and it is kept
as long as the run (``FATHOM_RUN_RETENTION_DAYS``). A caller sees only its own principal's
runs; any other id is "not found" (-32602), as the specification's security section asks
(tasks bound to the context that created them).

- The server declares tasks on the revisions with the ``initialize`` handshake (the SDK
  builds the ``initialize`` answer before it knows the revision), and serves them there;
  2026-07-28 has none: ``task`` is ignored and ``tasks/*`` are -32601.
- ``tools/call`` with ``task`` submits the run as any call does and answers at once with
  ``CreateTaskResult`` (status ``working``, the run's id, ``ttl``, ``pollInterval``, and for
  the model ``io.modelcontextprotocol/model-immediate-response``). With the ``thread`` of a
  research going on it is refused (-32602, naming that research's task): a task starts
  ``working`` with a run of its own.
  The SDK (mcp 2.3.0) validates every ``tools/call`` result as a ``CallToolResult`` at that
  version, so the tool raises :class:`TaskCreated` and :func:`answer_created_tasks`, a
  server middleware inside the handler's chain, answers it. Arguments that may not start a
  run are an ``Invalid params`` error (-32602) with the tool error's one line: there is no
  task to fail.
- ``tasks/get``: the task (``working`` while the run is queued or running, then
  ``completed``, ``failed`` or ``cancelled``; ``statusMessage`` its latest progress).
- ``tasks/result``: waits for the run's end and answers what the call would have (the report,
  its structured content; ``isError`` for a failed run), with
  ``io.modelcontextprotocol/related-task``; its own progress token gets the run's progress,
  each notification with that key too. A task cancelled is answered at once (no report),
  whether or not its run has wound down. Giving up this wait does not cancel the run.
- ``tasks/list``: the caller's runs over MCP, newest first, :data:`PAGE` at a time (the
  cursor the last listed run's place, its creation time and id: a run created or deleted
  between two pages moves no other; a cursor not of that shape is -32602).
- ``tasks/cancel``: cancels the run (``RunRequests.cancel``, as the chat's Cancel); the task
  is ``cancelled`` from then on. A task that has ended is -32602.

Not sent: ``notifications/tasks/status`` (optional in the specification) and progress on the
original call's token after its answer; ``tasks/get`` and ``tasks/result`` carry both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal

import mcp_types as types
from mcp.server.context import CallNext, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, METHOD_NOT_FOUND

from bots.mcp.callers import Caller, UnknownCaller
from bots.mcp.follow import RunGone
from core.chat.stores import ProgressRecord, RunPosition, RunRecord
from core.values import RunStatus
from core.words.wording import pick, request_language
from storage.records import CancelRequest

if TYPE_CHECKING:
    from bots.mcp.server import ResearchTool

#: ``_meta`` key tying a result to its task.
RELATED_TASK = "io.modelcontextprotocol/related-task"
#: ``_meta`` key of the text a host may hand its model while the task runs.
IMMEDIATE_RESPONSE = "io.modelcontextprotocol/model-immediate-response"
#: Suggested polling interval (ms): a run's steps take seconds.
POLL_INTERVAL_MS = 3000
#: Tasks in one ``tasks/list`` page.
PAGE = 50
#: Between a cursor's time and its run id.
CURSOR_SEPARATOR = "/"

Handler = Callable[..., Awaitable[Any]]
TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]
_TERMINAL = ("completed", "failed", "cancelled")


class TaskCreated(Exception):
    """Raised by the tool for a task-augmented call: its ``CreateTaskResult`` (wire form),
    which :func:`answer_created_tasks` returns as the call's answer."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__("task created")
        self.result = result


async def answer_created_tasks(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
    """Server middleware: a call that created a task is answered with its
    ``CreateTaskResult`` (see the module)."""
    try:
        return await call_next(ctx)
    except TaskCreated as created:
        return created.result


def capability() -> types.ServerTasksCapability:
    """What the server declares: ``tasks/list``, ``tasks/cancel`` and task-augmented
    ``tools/call``."""
    return types.ServerTasksCapability(
        list=types.TasksListCapability(),
        cancel=types.TasksCancelCapability(),
        requests=types.ServerTasksRequestsCapability(
            tools=types.TasksToolsCapability(call=types.TasksCallCapability())
        ),
    )


def task_status(run: RunRecord) -> TaskStatus:
    """The task's status of ``run``: cancelled once a cancel was asked (the specification:
    it stays so even if the run goes on to an end), else working until the run has finished."""
    if run.status is RunStatus.CANCELLED or run.cancel_requested:
        return "cancelled"
    if not run.status.finished:
        return "working"
    return "completed" if run.status is RunStatus.SUCCEEDED else "failed"


def served_here(ctx: ServerRequestContext[Any, Any]) -> None:
    """``tasks/*`` exist on the handshake's revisions only (the server declares tasks there):
    -32601 on 2026-07-28, which has none."""
    from bots.mcp.server import handshake_era

    if not handshake_era(ctx):
        raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=ctx.method)


def utc(moment: datetime) -> datetime:
    """``moment`` in UTC (a naive time is UTC, as SQLite returns it)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def iso(moment: datetime) -> str:
    """ISO 8601 in UTC."""
    return utc(moment).isoformat().replace("+00:00", "Z")


def cursor_of(run: RunRecord) -> str:
    """The ``tasks/list`` cursor after ``run``: its place in the newest-first order (its
    creation time and id), so a run created or deleted between two pages moves nothing."""
    return f"{utc(run.created_at).isoformat()}{CURSOR_SEPARATOR}{run.id}"


def position_of(cursor: str) -> RunPosition:
    """The place a :func:`cursor_of` cursor names; -32602 for anything else."""
    created, separator, run_id = cursor.partition(CURSOR_SEPARATOR)
    try:
        if not (separator and cursor.isascii() and len(cursor) <= 120):
            raise ValueError(cursor)
        if not (run_id and run_id.replace("-", "").isalnum()):
            raise ValueError(run_id)
        moment = datetime.fromisoformat(created)
        if moment.tzinfo is None:
            raise ValueError(created)
    except ValueError:
        raise MCPError(code=INVALID_PARAMS, message=f"Invalid cursor {cursor[:40]!r}") from None
    return utc(moment), run_id


def not_found(task_id: str) -> MCPError:
    return MCPError(
        code=INVALID_PARAMS, message=f"Failed to retrieve task: Task not found ({task_id})"
    )


@dataclass(frozen=True)
class ResearchTasks:
    """The ``tasks/*`` methods for one server's research tool (see the module).
    ``retention_days``: ``FATHOM_RUN_RETENTION_DAYS`` (None or 0: kept for ever)."""

    tool: ResearchTool
    retention_days: int | None = None

    def register(
        self, add: Callable[[str, type[Any], Callable[..., Awaitable[Any]]], None]
    ) -> None:
        """Register the methods with ``add`` (``Server.add_request_handler``)."""
        add("tasks/get", types.GetTaskRequestParams, self.get)
        add("tasks/result", types.GetTaskPayloadRequestParams, self.result)
        add("tasks/list", types.PaginatedRequestParams, self.list)
        add("tasks/cancel", types.CancelTaskRequestParams, self.cancel)

    @property
    def ttl(self) -> int | None:
        """How long a task is kept from its creation, at least (ms; None: for ever): runs are
        pruned that long after they finish."""
        days = self.retention_days
        return days * 86_400_000 if days else None

    def created(self, run: RunRecord) -> dict[str, Any]:
        """The ``CreateTaskResult`` of ``run``'s task (wire form)."""
        language = request_language(run.topic)
        immediate = pick(
            language,
            f"Fathom is researching “{run.topic}” (task {run.id}); the cited report takes "
            "minutes. Fetch it with tasks/result, or poll tasks/get.",
            f"Fathom 正在研究“{run.topic}”（任务 {run.id}）；带引用的报告需要几分钟。"
            "可用 tasks/result 获取，或用 tasks/get 查询进度。",
        )
        return {"task": self._task(run, None), "_meta": {IMMEDIATE_RESPONSE: immediate}}

    async def get(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskRequestParams
    ) -> dict[str, Any]:
        run = await self._owned(ctx, params.task_id)
        return self._task(run, await self._latest(run))

    async def result(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetTaskPayloadRequestParams
    ) -> dict[str, Any]:
        """What the call would have answered, once the run has finished; a task cancelled
        (its run still winding down) is answered at once. Giving up this wait cancels
        nothing."""
        run = await self._owned(ctx, params.task_id)
        try:
            if task_status(run) == "cancelled" and not run.status.finished:
                answer = await self.tool.cancelled_result(run)
            else:
                answer = await self.tool.follow_to_result(ctx, run, task=True)
        except RunGone:
            raise not_found(params.task_id) from None
        wire = answer.model_dump(by_alias=True, mode="json", exclude_none=True)
        wire["_meta"] = {**wire.get("_meta", {}), RELATED_TASK: {"taskId": run.id}}
        return wire

    async def list(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams
    ) -> dict[str, Any]:
        served_here(ctx)
        before = None if params.cursor is None else position_of(params.cursor)
        caller = self._caller(ctx)
        runs = [
            run for run in await self.tool.runs_of(caller, PAGE + 1, before) if caller.owns(run)
        ]
        page = runs[:PAGE]
        answer: dict[str, Any] = {
            "tasks": [self._task(run, await self._latest(run)) for run in page]
        }
        if len(runs) > PAGE:
            answer["nextCursor"] = cursor_of(page[-1])
        return answer

    async def cancel(
        self, ctx: ServerRequestContext[Any, Any], params: types.CancelTaskRequestParams
    ) -> dict[str, Any]:
        run = await self._owned(ctx, params.task_id)
        status = task_status(run)
        if status in _TERMINAL:
            raise MCPError(code=INVALID_PARAMS, message=f"Task {run.id} is already {status}")
        answer = await self.tool.cancel_run(run.id)
        run = await self._owned(ctx, params.task_id)
        if answer in (CancelRequest.POSTING, CancelRequest.ENDED):
            # Too late: the run finished between the read above and the cancel.
            raise MCPError(
                code=INVALID_PARAMS, message=f"Task {run.id} is already {task_status(run)}"
            )
        return self._task(run, await self._latest(run))

    async def _owned(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> RunRecord:
        """The run of ``task_id`` if it is the caller's, else "not found"."""
        served_here(ctx)
        run = await self.tool.run(task_id)
        if run is None or not self._caller(ctx).owns(run):
            raise not_found(task_id)
        return run

    def _caller(self, ctx: ServerRequestContext[Any, Any]) -> Caller:
        try:
            return self.tool.caller_of(ctx)
        except UnknownCaller as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None

    async def _latest(self, run: RunRecord) -> ProgressRecord | None:
        rows = await self.tool.progress_of(run.id)
        return rows[-1] if rows else None

    def _task(self, run: RunRecord, latest: ProgressRecord | None) -> dict[str, Any]:
        """``run``'s task (wire form; ``ttl`` is always present, null for ever)."""
        status = task_status(run)
        message = latest.text if latest is not None else None
        if status == "cancelled" and not run.status.finished:
            message = pick(
                request_language(run.topic),
                "Cancelling: nothing more is searched or written.",
                "正在取消：不再搜索或撰写。",
            )
        moments = [run.created_at, run.started_at, run.finished_at]
        if latest is not None:
            moments.append(latest.created_at)
        updated = iso(max(utc(m) for m in moments if m is not None))
        task: dict[str, Any] = {
            "taskId": run.id,
            "status": status,
            "createdAt": iso(run.created_at),
            "lastUpdatedAt": updated,
            "ttl": self.ttl,
        }
        if message:
            task["statusMessage"] = message
        if status not in _TERMINAL:
            task["pollInterval"] = POLL_INTERVAL_MS
        return task
