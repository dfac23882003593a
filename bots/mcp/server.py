"""Fathom's research as an MCP server: one ``research`` tool (issue 57).

:func:`research_server` makes the SDK's low-level ``mcp.server.lowlevel.Server`` (mcp
2.3.0) from the process's services (:class:`McpServices`, gathered by :func:`services_of`)
and the caller: a fixed principal (``fathom mcp`` over stdio: ``local``) or a function of
the request's context, so one server serves every caller; :func:`build_server` is ``fathom
serve``'s (``/mcp``: its bearer token's principal, or the Slack user a request Slack signed
names; ``bots.mcp.http``, ``bots.mcp.callers``). A call of the tool:

1. checks its arguments; a bad one (an empty topic, a depth out of ``1..FATHOM_MAX_DEPTH``,
   an unknown strategy or sources, ``internal`` sources where the caller may use none, a
   thread that is not one of the caller's) is a tool error (``isError``, one line), and the
   server keeps serving;
2. submits the run as the chat layer does (``core.research.requests.RunRequests.submit``:
   dedupe, one active run per thread, ``FATHOM_USER_CONCURRENCY`` and the daily quotas per
   caller) in one of the caller's threads (``mcp:<principal>:mcp:<thread id>``, a uuid hex
   made here and returned as ``thread``; a follow-up passes it back and the key is rebuilt
   from the caller, so no caller reaches another's thread), requested by the caller
   (``mcp:<principal>:<principal>``, which ``fathom forget --user`` takes), and hands it to the
   process's job runner (in-process, or procrastinate's queue); a call with the ``thread``
   of a research still going on follows that research instead (a caller that left comes
   back for its report; not on 2026-07-28's HTTP, below);
3. follows it (``bots.mcp.follow.RunFollower``), sending each progress row as
   ``notifications/progress`` with the caller's progress token (progress: rows seen, no
   total; message: the row's text);
4. returns the Markdown report as text (for a run that failed or was cancelled, why; a
   failure is ``isError``) and ``ResearchResult`` as structured content.

The submission is shielded from a cancel, which then reaches the call as it follows the run,
so a cancel that comes while the run is being created still cancels it. The caller's cancel
cancels the run the call created (``RunRequests.cancel``, as the chat's Cancel does); a call
that only follows a research already going on stops following, and that research goes on. A
caller that goes away without cancelling leaves its run to finish. Which is which depends on
the wire, as the protocol defines a cancel on each:

- stdio, and HTTP sessions of protocol 2025-11-25 and before: a cancel is
  ``notifications/cancelled`` (basic/utilities/cancellation). The SDK
  (``mcp/shared/jsonrpc_dispatcher.py``) sets the request's ``DispatchContext.cancel_requested``
  on it and then cancels the handler's scope; when the connection closes (stdin's EOF, the
  session's end) it cancels every handler without setting it. So a handler cancelled with
  the flag unset is a disconnect: its run goes on, is stored, and a later call with its
  ``thread`` finds its report. The flag is read from the session's dispatch context, which
  the low-level context does not expose by a public name in mcp 2.3.0.
- HTTP of protocol 2026-07-28 (one POST a request, no session): "cancellation is closing the
  response stream" and no notification is sent (``mcp/server/_streamable_http_modern.py``);
  a broken stream loses the request and its client asks again with a new one. So a call
  ended for any reason (its client closed the stream, the connection dropped, a proxy's
  request limit, the server stopping) cancels its run: nobody could collect it (that
  revision has no tasks, and the ``thread`` is only in the result), and it would hold a place
  of ``FATHOM_USER_CONCURRENCY`` that the repeated request needs.

A caller that wants a run to outlive its connection on any wire asks for a task
(2025-11-25's ``tools/call`` with ``task``, ``bots.mcp.tasks``).
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp_types import INVALID_PARAMS
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

from bots.chat.replies import PlainMarkup, Replies
from bots.chat.settings import ChatPolicy
from bots.mcp.callers import Caller, UnknownCaller
from bots.mcp.delivery import Wakeup
from bots.mcp.follow import Outcomes, ResearchResult, RunFollower, RunGone, research_result
from bots.mcp.settings import LOCAL
from bots.mcp.tasks import RELATED_TASK, ResearchTasks, TaskCreated, answer_created_tasks
from bots.mcp.tasks import capability as tasks_capability
from core.chat.stores import (
    ChatProgress,
    ChatThreads,
    ProgressRecord,
    RunPosition,
    RunRecord,
)
from core.engine.registry import STRATEGIES
from core.research.outcome import final_progress_text
from core.research.requests import DailyLimitReached, ResearchRequest, RunRejected
from core.values import RunStatus, SourceChoice
from core.words.wording import Language, pick, request_language
from storage.errors import UserBusy

if TYPE_CHECKING:
    from bots.composition import App
    from core.operations.job import ResearchJob
    from core.runtime import Runtime

log = logging.getLogger(__name__)

#: The tool's name.
TOOL = "research"
#: A thread id Fathom made (``uuid.uuid4().hex``).
_THREAD_ID = re.compile(r"^[0-9a-f]{32}$")

DESCRIPTION = (
    "Deep research on the web (and, where this caller may, the team's internal sources): "
    "Fathom plans searches, reads the results and writes a Markdown report whose claims cite "
    "numbered sources and are checked against them. A run takes minutes (each round of "
    "`depth` is a search); progress notifications say where it is (`1/3th search executed.`, "
    "the plan's steps, checking citations, writing the report), and cancelling the call "
    "cancels the research. The result is the report as text, with the sources, the claim "
    "check, the usage and the `thread` id as structured content; pass `thread` back to ask a "
    "follow-up that builds on what was found. The report is written in the topic's language."
)


class ResearchArguments(BaseModel):
    """The ``research`` tool's input (its ``inputSchema``; checked by :func:`parse_arguments`
    so that each bad argument gets one clear line)."""

    topic: str = Field(description="What to research, as a question or a subject.")
    depth: int | None = Field(
        None, description="Search rounds (more: longer and broader). Default: the server's."
    )
    strategy: str | None = Field(
        None, description=f"How to research: {', '.join(STRATEGIES)}. Default: the server's."
    )
    sources: str | None = Field(
        None,
        description="web, internal (the team's sources this caller may use) or all. Default: all.",
    )
    language: str | None = Field(
        None,
        description="en or zh: the language of this tool's messages. The report itself is "
        "written in the topic's language.",
    )
    thread: str | None = Field(
        None, description="The `thread` of an earlier result, to follow up in that research."
    )


class Runs(Protocol):
    async def get_run(self, run_id: str) -> RunRecord | None: ...

    async def active_run_in_thread(self, thread_key: str) -> RunRecord | None: ...

    async def recent_runs_for_user(
        self, requested_by: str, limit: int = 10, before: RunPosition | None = None
    ) -> list[RunRecord]: ...


class Requests(Protocol):
    """``core.research.requests.RunRequests``, as far as the tool uses it."""

    async def submit(
        self, request: ResearchRequest, *, user_limit: int | None = None
    ) -> tuple[RunRecord, bool]: ...

    async def cancel(self, run_id: str) -> Any: ...


class Enqueue(Protocol):
    async def enqueue(self, run_id: str) -> None: ...


class Scopes(Protocol):
    """``core.knowledge.Knowledge``, as far as the tool uses it."""

    def allowed(self, thread_key: str) -> list[Any]: ...


@dataclass(frozen=True)
class McpServices:
    """What the server needs of the process: the run requests (submit, cancel), the runs,
    threads and progress rows, the stored outcome of a run (``ResearchJob.stored_outcome``),
    the job runner, the internal sources (None: none configured), the chat policy (depth
    and strategy defaults, ``FATHOM_USER_CONCURRENCY``) and this process's progress
    wake-up (``bots.mcp.delivery.McpPosters.wakeup``); :func:`services_of` gathers them."""

    requests: Requests
    runs: Runs
    threads: ChatThreads
    rows: ChatProgress
    outcomes: Outcomes
    runner: Enqueue
    policy: ChatPolicy
    knowledge: Scopes | None = None
    wakeup: Wakeup | None = None
    #: How often a followed run is read when nothing wakes its handler (seconds).
    poll: float = 0.15
    #: ``FATHOM_RUN_RETENTION_DAYS`` (a task's ``ttl``; None or 0: kept for ever).
    retention_days: int | None = None


#: The caller: a fixed principal's name, or read from the request (``/mcp``: its token's
#: principal, or the Slack user a signed Slackbot request names; ``bots.mcp.http.caller_of``).
Principal = str | Callable[[ServerRequestContext[Any, Any]], Caller]


class BadArguments(ValueError):
    """One line saying which argument is wrong and what is allowed."""


@dataclass(frozen=True)
class Asked:
    """A call's arguments, checked."""

    topic: str
    depth: int
    strategy: str
    sources: SourceChoice
    language: Language
    thread: str | None


def parse_arguments(arguments: dict[str, Any] | None, policy: ChatPolicy) -> Asked:
    """The call's arguments checked against ``policy``; :class:`BadArguments` otherwise."""
    args = dict(arguments or {})
    topic = args.get("topic")
    hint = args.get("language")
    language: Language = (
        hint if hint in ("en", "zh") else request_language(topic if isinstance(topic, str) else "")
    )

    def bad(en: str, zh: str) -> BadArguments:
        return BadArguments(pick(language, en, zh))

    unknown = sorted(set(args) - set(ResearchArguments.model_fields))
    if unknown:
        raise bad(f"unknown argument {unknown[0]!r}", f"未知参数 {unknown[0]!r}")
    if not isinstance(topic, str) or not topic.strip():
        raise bad("topic is empty: say what to research", "topic 为空：请说明要研究什么")
    depth = args.get("depth")
    if depth is None:
        depth = policy.default_depth
    if isinstance(depth, bool) or not isinstance(depth, int) or not 1 <= depth <= policy.max_depth:
        raise bad(
            f"depth must be a whole number from 1 to {policy.max_depth}, not {depth!r}",
            f"depth 必须是 1 到 {policy.max_depth} 之间的整数，而不是 {depth!r}",
        )
    strategy = args.get("strategy") or policy.strategy
    names = ", ".join(STRATEGIES)
    if not isinstance(strategy, str) or strategy.strip().lower() not in STRATEGIES:
        raise bad(
            f"unknown strategy {strategy!r}; use one of: {names}",
            f"未知策略 {strategy!r}；可用：{names}",
        )
    sources = args.get("sources") or SourceChoice.ALL.value
    choices = [c.value for c in SourceChoice]
    if sources not in choices:
        raise bad(
            f"sources must be one of {', '.join(choices)}, not {sources!r}",
            f"sources 必须是 {', '.join(choices)} 之一，而不是 {sources!r}",
        )
    thread = args.get("thread")
    if thread is not None and (not isinstance(thread, str) or not _THREAD_ID.match(thread)):
        raise bad(
            f"unknown thread {thread!r}: pass the `thread` of an earlier result",
            f"未知的 thread {thread!r}：请传入之前结果中的 `thread`",
        )
    return Asked(
        topic.strip(), depth, strategy.strip().lower(), SourceChoice(sources), language, thread
    )


def cancel_requested(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether a call whose handler was cancelled was cancelled by its caller (see the
    module): it sent ``notifications/cancelled`` for it (the flag of the SDK's dispatch
    context of the request, behind the session), or it is a 2026-07-28 call over HTTP, where
    any end of the exchange is its cancel."""
    dispatch = getattr(ctx.session, "_request_outbound", None)
    event = getattr(dispatch, "cancel_requested", None)
    if event is not None and event.is_set():
        return True
    return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and ctx.request is not None


def handshake_era(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request is on a revision with the ``initialize`` handshake, where the
    server declares tasks (``bots.mcp.tasks``; 2026-07-28 has none)."""
    return ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS


async def send_task_progress(
    ctx: ServerRequestContext[Any, Any], task_id: str, progress: float, message: str
) -> None:
    """A progress notification for the request of ``ctx``, tied to task ``task_id`` (the
    specification: every notification related to a task carries
    ``io.modelcontextprotocol/related-task``); nothing without a progress token."""
    token = progress_token_from_params(ctx.params)
    if token is None:
        return
    params = types.ProgressNotificationParams(
        progress_token=token,
        progress=progress,
        message=message,
        _meta={RELATED_TASK: {"taskId": task_id}},
    )
    related = str(ctx.request_id) if ctx.request_id is not None else None
    await ctx.session.send_notification(types.ProgressNotification(params=params), related)


def tool_error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def research_tool() -> types.Tool:
    return types.Tool(
        name=TOOL,
        title="Deep research",
        description=DESCRIPTION,
        input_schema=ResearchArguments.model_json_schema(),
        output_schema=ResearchResult.model_json_schema(),
        annotations=types.ToolAnnotations(
            title="Deep research", read_only_hint=True, open_world_hint=True
        ),
        execution=types.ToolExecution(task_support="optional"),
    )


class ResearchTool:
    """The ``research`` tool's calls for one server (see the module)."""

    def __init__(self, services: McpServices, principal: Principal) -> None:
        self._services = services
        self._principal = principal
        self._follower = RunFollower(
            services.runs, services.rows, wakeup=services.wakeup, poll=services.poll
        )
        self.tasks = ResearchTasks(self, services.retention_days)

    def caller_of(self, ctx: ServerRequestContext[Any, Any]) -> Caller:
        """Who makes the request of ``ctx``; :class:`~bots.mcp.callers.UnknownCaller` when it
        should name its caller and does not."""
        principal = self._principal
        return Caller.principal(principal) if isinstance(principal, str) else principal(ctx)

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[research_tool()])

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        if params.name != TOOL:
            return tool_error(f"unknown tool {params.name!r}; this server has {TOOL!r}")
        services = self._services
        as_task = params.task is not None and handshake_era(ctx)
        try:
            asked = parse_arguments(params.arguments, services.policy)
            with anyio.CancelScope(shield=True):  # a cancel now reaches _attend, run known
                run, created = await self._submit(self.caller_of(ctx), asked, as_task)
        except (BadArguments, UnknownCaller) as exc:
            if as_task:  # no task to fail (bots.mcp.tasks)
                raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
            return tool_error(str(exc))
        if as_task:
            raise TaskCreated(self.tasks.created(run))
        return await self._attend(ctx, run, created)

    async def run(self, run_id: str) -> RunRecord | None:
        return await self._services.runs.get_run(run_id)

    async def runs_of(
        self, caller: Caller, limit: int, before: RunPosition | None = None
    ) -> list[RunRecord]:
        """``caller``'s newest runs (at most ``limit``; older than ``before`` if given)."""
        runs = self._services.runs
        return await runs.recent_runs_for_user(caller.requested_by, limit, before)

    async def progress_of(self, run_id: str) -> list[ProgressRecord]:
        return await self._services.rows.since(run_id)

    async def cancelled_result(self, run: RunRecord) -> types.CallToolResult:
        """What a task whose run was asked to cancel answers while the run winds down: no
        report, the structured content as far as it went, its status ``cancelled``."""
        services = self._services
        _, result = await research_result(services.runs, services.outcomes, run.id)
        text = pick(
            request_language(run.topic),
            "Cancelled: nothing more is searched or written, and there is no report.",
            "已取消：不再搜索或撰写，也没有报告。",
        )
        data = result.model_copy(update={"status": RunStatus.CANCELLED.value})
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=data.model_dump(mode="json"),
        )

    async def cancel_run(self, run_id: str) -> Any:
        """Cancel the run as the chat's Cancel does (``RunRequests.cancel``'s answer)."""
        return await self._services.requests.cancel(run_id)

    async def _submit(
        self, caller: Caller, asked: Asked, as_task: bool = False
    ) -> tuple[RunRecord, bool]:
        """The run of ``asked``, created and handed to the runner, and True; or, for a call
        with the ``thread`` of a research going on, that research's run and False (a task
        is not: a new task has a run of its own). :class:`BadArguments` (one line) when it
        may not start."""
        services, language = self._services, asked.language
        if asked.thread is not None:
            key = caller.thread(asked.thread)
            if await services.threads.get_thread(str(key)) is None:
                raise BadArguments(
                    pick(
                        language,
                        f"unknown thread {asked.thread!r}: pass the `thread` of an earlier result",
                        f"未知的 thread {asked.thread!r}：请传入之前结果中的 `thread`",
                    )
                )
            # Its research still going on (its caller left, or asks again): follow that one.
            active = await services.runs.active_run_in_thread(str(key))
            if active is not None and as_task:
                raise BadArguments(
                    pick(
                        language,
                        f"a research is going on in thread {asked.thread!r} (task {active.id}): "
                        "fetch it with tasks/result",
                        f"thread {asked.thread!r} 中已有研究在进行（任务 {active.id}）："
                        "请用 tasks/result 获取",
                    )
                )
            if active is not None:
                return active, False
        else:
            key = caller.thread(uuid.uuid4().hex)
        if asked.sources is SourceChoice.INTERNAL:
            knowledge = services.knowledge
            if knowledge is None or not knowledge.allowed(str(key)):
                raise BadArguments(
                    pick(
                        language,
                        "sources=internal: no internal source is configured for this caller "
                        f"(FATHOM_MCP_CONFIG channels: {caller.scope})",
                        "sources=internal：没有为这个调用方配置内部来源"
                        f"（FATHOM_MCP_CONFIG 的 channels：{caller.scope}）",
                    )
                )
        request = ResearchRequest(
            topic=asked.topic,
            depth=asked.depth,
            strategy=asked.strategy,
            thread=key,
            requested_by=caller.requested_by,
            sources=asked.sources,
        )
        try:
            run, _ = await services.requests.submit(
                request, user_limit=services.policy.user_concurrency
            )
        except RunRejected as exc:
            raise BadArguments(str(exc)) from None
        except UserBusy as exc:
            raise BadArguments(
                pick(
                    language,
                    f"{exc.active} of your researches are running (at most {exc.limit}); "
                    "wait for one to finish or cancel it",
                    f"你已有 {exc.active} 个研究在进行（最多 {exc.limit} 个）；请等待或取消一个",
                )
            ) from None
        except DailyLimitReached as exc:  # worded as the chat says it (held tokens too)
            words = Replies(PlainMarkup(), language)
            raise BadArguments(
                words.daily_limit(exc.kind, exc.limit, exc.resets_at, exc.reserved)
            ) from None
        await services.runner.enqueue(run.id)
        return run, True

    async def _attend(
        self, ctx: ServerRequestContext[Any, Any], run: RunRecord, created: bool
    ) -> types.CallToolResult:
        """Follow the run to its end, sending its progress; then its result. The caller's
        cancel cancels the run if this call ``created`` it; its departure does not (see the
        module)."""
        try:
            return await self.follow_to_result(ctx, run)
        except RunGone:
            return tool_error(f"run {run.id} is not stored any more")
        except anyio.get_cancelled_exc_class():
            if not created:
                log.info("run %s: a call following it ended; the run goes on", run.id)
            elif cancel_requested(ctx):
                with anyio.CancelScope(shield=True):
                    await self._services.requests.cancel(run.id)
                log.info("run %s: cancelled by its MCP caller", run.id)
            else:
                log.info("run %s: its MCP caller left; the run goes on", run.id)
            raise

    async def follow_to_result(
        self, ctx: ServerRequestContext[Any, Any], run: RunRecord, task: bool = False
    ) -> types.CallToolResult:
        """Wait for ``run``'s end, sending each progress row to the request of ``ctx`` (its
        progress token's, if it has one; for a ``task``'s ``tasks/result``, with
        ``io.modelcontextprotocol/related-task``); then what the call answers. ``progress``
        counts the rows; no ``total`` is sent, as a run's steps are not known ahead (a plan
        may stop early, a graph of sub-questions grows). :class:`RunGone` when it is not
        stored."""
        services = self._services
        seen = 0
        async for row in self._follower.follow(run.id):
            seen += 1
            if task:
                await send_task_progress(ctx, run.id, float(seen), row.text)
            else:
                await ctx.session.report_progress(float(seen), None, row.text)
        outcome, result = await research_result(services.runs, services.outcomes, run.id)
        if outcome.status is RunStatus.SUCCEEDED and outcome.report_markdown:
            text = outcome.report_markdown
        else:
            text = outcome.error or final_progress_text(outcome)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)],
            structured_content=result.model_dump(mode="json"),
            is_error=outcome.status is RunStatus.FAILED,
        )


def research_server(services: McpServices, principal: Principal = LOCAL) -> Server[Any]:
    """The MCP server with the ``research`` tool (see the module): ``principal`` is the
    caller's name, or how to read it from a request's context."""
    from core.build import version

    tool = ResearchTool(services, principal)
    server = ResearchServer(
        "fathom",
        version=version(),
        instructions=DESCRIPTION,
        on_list_tools=tool.list_tools,
        on_call_tool=tool.call_tool,
    )
    tool.tasks.register(server.add_request_handler)
    server.middleware.append(answer_created_tasks)  # inside the SDK's tracing middleware
    return server


class ResearchServer(Server[Any]):
    """The SDK's low-level server, declaring tasks (``bots.mcp.tasks``) on the handshake's
    protocol revisions (2026-07-28 has none)."""

    def get_capabilities(self, *args: Any, **kwargs: Any) -> types.ServerCapabilities:
        capabilities = super().get_capabilities(*args, **kwargs)
        if kwargs.get("protocol_version") in MODERN_PROTOCOL_VERSIONS:
            return capabilities
        return capabilities.model_copy(update={"tasks": tasks_capability()})


def services_of(
    runtime: Runtime,
    job: ResearchJob,
    runner: Enqueue,
    policy: ChatPolicy,
    wakeup: Wakeup | None = None,
) -> McpServices:
    """The services of a process: its runtime (``core.runtime.Runtime``), its research job
    (the stored outcome of a run) and job runner, its chat policy and its
    ``McpPosters.wakeup`` (``fathom serve``'s: ``bots.composition.App``'s ``runtime``,
    ``job``, ``runner``, ``settings.policy`` and ``mcp.wakeup``)."""
    store = runtime.store
    return McpServices(
        retention_days=runtime.settings.run_retention_days,
        requests=runtime.research.requests,
        runs=store.runs,
        threads=store.threads,
        rows=store.progress,
        outcomes=job.stored_outcome,
        runner=runner,
        policy=policy,
        knowledge=runtime.knowledge,
        wakeup=wakeup,
    )


def build_server(app: App) -> Server[Any]:
    """``fathom serve``'s research server (``/mcp``): on ``app``'s runtime, job and runner,
    each call's caller the one its request names (``bots.mcp.http.caller_of``)."""
    from bots.mcp.http import caller_of

    assert app.mcp is not None, "the composition root registers the mcp delivery"
    services = services_of(app.runtime, app.job, app.runner, app.settings.policy, app.mcp.wakeup)
    return research_server(services, lambda ctx: caller_of(ctx.request, ctx.params))
