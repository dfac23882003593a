"""The graph strategy (after MindSearch, arXiv 2407.20183): sub-questions searched in parallel.

Each planner turn answers validated JSON (``{"nodes": [{"name", "question", "after"}],
"finish"}``), never code. The turn's nodes then run as soon as the nodes they come ``after``
are done: each is searched (query only), its best pages are read, and a short answer is
written from its results with ``[n]`` citations into the run's numbered sources. Independent
nodes run at once, at most ``max_parallel`` searches of the run at a time.

The graph is kept with the thread's variables (``strategyState.graph``, see
``state.py``); a node's question joins ``topics``
and its results ``findings`` when it is searched, so the state is checkpointed after the plan
and after every node's search and answer (what the planner proposes is checked in
``plan.py``). An interrupted run resumes its unfinished nodes
without searching an answered one again; a follow-up in the thread may extend the graph.
"""

from __future__ import annotations

import asyncio
import graphlib
import logging
import re
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import Field

from core.claims.check import check_claims
from core.claims.deadline import Deadline
from core.config import VERIFY_SECONDS, EnvSettings, env
from core.engine.fallback import fallback_query
from core.engine.graph import notes as graph_notes
from core.engine.graph.plan import CheckedPlan, GraphPlan, check_plan
from core.engine.graph.prompts import (
    PROMPTS,
    WRITER_GRAPH,
    graph_plan_problems_message,
    graph_planner_messages,
    node_answer_messages,
)
from core.engine.graph.state import GRAPH, GraphNode, NodeStatus, graph_of
from core.engine.graph.tasks import graph_tasks
from core.engine.progress import ProgressKind, ProgressTask, search_executed_text
from core.engine.searching import PageReading, search_topic, searching_text
from core.engine.sources import (
    ATTACHMENT,
    NumberedSource,
    cited_body,
    evidence_of,
    files_digest,
    number_sources,
    source_key,
    writer_source_blocks,
)
from core.engine.state import RunState, StepHooks, StopReason
from core.engine.strategy import RegisteredStrategy, StrategyTools, WriterContext
from core.engine.topics import find_duplicate
from core.llm import LLMError
from core.llm.protocols import JsonModel, TextModel
from core.models import Finding
from core.pages.reader import PageReader
from core.search import SearchProvider
from core.text import clean_text
from core.timer import MONOTONIC, Timer
from core.untrusted import as_data
from core.words import note_words, wording

log = logging.getLogger(__name__)

#: A node's answer is kept to this many characters; the planner sees this much of each.
ANSWER_CHARS = 1200
PLANNER_ANSWER_CHARS = 300
#: The planner sees at most this many nodes of the thread's graph (the newest).
PLANNER_NODES = 40
#: A citation; more digits than any source list has are no citation (and no huge int()).
_CITATION = re.compile(r"\[(\d{1,4})\]")


def graph_lines(graph: Sequence[GraphNode], answer_chars: int = PLANNER_ANSWER_CHARS) -> list[str]:
    """One line per node: its name, question, parents, status and (short) answer."""
    lines = []
    for node in graph[-PLANNER_NODES:]:
        after = f" (after {', '.join(node.after)})" if node.after else ""
        line = f"[{node.name}] {node.question}{after}: {node.status.value}"
        if node.answer:
            line += f" — {node.answer[:answer_chars]}"
        elif node.error:
            line += f" ({node.error})"
        lines.append(line)
    return lines


def skip_unsearched(state: RunState) -> None:
    """Mark the run's sub-questions not searched yet as failed: the searching was stopped.
    (Searched ones keep their status: answering one is no search.)"""
    for node in graph_of(state.variables).nodes:
        if node.run_id == state.run_id and node.status is NodeStatus.PENDING:
            node.status, node.error = NodeStatus.FAILED, graph_notes.STOPPED_BEFORE_SEARCH


def turn_text(state: RunState, nodes: Iterable[GraphNode]) -> str:
    """``{turn}/{depth}th search executed.`` and the turn's sub-questions, each marked."""
    lines = [search_executed_text(state.rounds_done, state.depth)]
    for node in nodes:
        mark = "✓" if node.status is NodeStatus.ANSWERED else "✗"
        why = ""
        if node.status is NodeStatus.FAILED and node.error:
            why = wording.pick(
                state.language,
                f" ({node.error})",
                f"（{graph_notes.node_error_words(state.language, node.error)}）",
            )
        lines.append(f"{mark} {node.question}{why}")
    return "\n".join(lines)


class GraphStrategy:
    def __init__(
        self,
        planner: JsonModel,
        answerer: TextModel,
        search: SearchProvider,
        reader: PageReader | None = None,
        *,
        max_parallel: int = 10,
        max_nodes: int = 12,
        verifier: JsonModel | None = None,
        verify_seconds: float = VERIFY_SECONDS,
        timer: Timer = MONOTONIC,
    ) -> None:
        self._planner = planner
        self._verifier = verifier
        self._verify_seconds = verify_seconds
        self._timer = timer
        self._answerer = answerer
        self._search = search
        self._reader = reader
        self._max_parallel = max_parallel
        self._max_nodes = max_nodes

    @staticmethod
    def run_topics(state: RunState) -> list[str]:
        """The sub-questions this run searched."""
        searched = set(state.variables.topics)
        return [
            n.question
            for n in graph_of(state.variables).nodes
            if n.run_id == state.run_id and n.question in searched
        ]

    @staticmethod
    def writer_context(state: RunState) -> WriterContext:
        """The thread's graph with its answers (at most ``ANSWER_CHARS`` of each), which the
        writer builds the report on."""
        return WriterContext(
            WRITER_GRAPH, graph_lines(graph_of(state.variables).nodes, ANSWER_CHARS)
        )

    @staticmethod
    def tasks(state: RunState, searching: str | None = None) -> list[ProgressTask]:
        """This run's sub-questions and where each stands."""
        return graph_tasks(state)

    @staticmethod
    def analysed(state: RunState) -> bool:
        """Only an answer marks a sub-question answered, and only the planner plans one other
        than the run's own topic."""
        own = graph_of(state.variables).of_run(state.run_id)
        asked = (state.topic, fallback_query(state.topic))
        return any(n.status is NodeStatus.ANSWERED or n.question not in asked for n in own)

    @staticmethod
    def details(state: RunState) -> dict[str, Any]:
        """The sub-questions this run planned (``nodes``), without their run's id."""
        own = graph_of(state.variables).of_run(state.run_id)
        return {"nodes": [n.model_dump(mode="json", exclude={"run_id"}) for n in own]}

    async def run(self, state: RunState, hooks: StepHooks) -> StopReason:
        turn = _Turn(
            state,
            hooks,
            search=self._search,
            reader=self._reader,
            answerer=self._answerer,
            max_parallel=self._max_parallel,
            verifier=self._verifier,
            verify_seconds=self._verify_seconds,
            timer=self._timer,
        )
        variables = state.variables
        while True:
            if hooks.is_cancelled():
                return StopReason.CANCELLED
            if (why := hooks.stop_reason()) is not None:
                skip_unsearched(state)
                searched = [
                    n
                    for n in graph_of(variables).nodes
                    if n.run_id == state.run_id and n.status is NodeStatus.SEARCHED
                ]
                if searched:  # their searches are done: they are answered and used
                    await turn.run(searched)
                    if hooks.is_cancelled():
                        return StopReason.CANCELLED
                own = graph_of(variables).of_run(state.run_id)
                worked = (n.turn for n in own if n.error != graph_notes.STOPPED_BEFORE_SEARCH)
                state.rounds_done = max(state.rounds_done, *worked, 0)
                variables.should_continue = False
                variables.next_search_topic = None
                await hooks.checkpoint(state)
                return why
            own = graph_of(variables).of_run(state.run_id)
            nodes = [n for n in own if n.status in (NodeStatus.PENDING, NodeStatus.SEARCHED)]
            if not nodes:
                # A turn whose nodes all finished is done, also when the process stopped
                # before counting it.
                state.rounds_done = max(state.rounds_done, *(n.turn for n in own), 0)
                if not variables.should_continue and state.rounds_done > 0:
                    return StopReason.PLANNER_STOPPED
                if state.rounds_done >= state.depth:
                    return StopReason.DEPTH_REACHED
                planned = await self._plan(state)
                if isinstance(planned, StopReason):
                    variables.should_continue = False
                    variables.next_search_topic = None
                    await hooks.checkpoint(state)
                    return planned
                nodes = planned
                await hooks.checkpoint(state)
                continue  # (a cancel is seen at the top)
            await turn.run(nodes)
            unfinished = (NodeStatus.PENDING, NodeStatus.SEARCHED)
            if any(n.status in unfinished for n in nodes):  # left for a resume: cancelled
                return StopReason.CANCELLED
            state.rounds_done = max(state.rounds_done, nodes[0].turn)
            variables.next_search_topic = None
            await hooks.checkpoint(state)
            await hooks.progress(ProgressKind.SEARCHED, turn_text(state, nodes), None)

    # -- planning ---------------------------------------------------------------------------

    def _room(self, state: RunState) -> int:
        own = len(graph_of(state.variables).of_run(state.run_id))
        return max(0, self._max_nodes - own)

    async def _plan(self, state: RunState) -> list[GraphNode] | StopReason:
        """The next turn's nodes, added to the graph (or why the run stops)."""
        variables = state.variables
        room = self._room(state)
        if room == 0:
            state.note(graph_notes.graph_full_words(state.language, self._max_nodes))
            return StopReason.PLANNER_STOPPED
        turn = state.rounds_done + 1
        messages = graph_planner_messages(
            topic=state.topic,
            turn=turn,
            depth=state.depth,
            room=room,
            graph=graph_lines(graph_of(variables).nodes),
            files=files_digest(variables.files, state.topic),
            today=state.today,
            guidance=variables.guidance_for(state.run_id),
        )
        checked = CheckedPlan([], [])
        plan = GraphPlan(finish=True)
        for attempt in range(2):
            try:
                with state.usage.timed("planning"):
                    plan = await self._planner.complete_json(
                        messages, GraphPlan, usage=state.usage, schema_name="graph_plan"
                    )
            except LLMError as exc:
                log.warning("graph planner failed in run %s: %s", state.run_id, exc)
                state.model_failure = exc
                return self._fallback(state, note_words.planner_failed_words(state.language, exc))
            state.model_answered = True
            checked = check_plan(plan, graph_of(variables).nodes, variables.topics, room)
            if not checked.problems:
                break
            if attempt == 0:
                messages = [
                    *messages,
                    {"role": "assistant", "content": plan.model_dump_json()},
                    graph_plan_problems_message(checked.problems),
                ]
        if checked.problems:
            left_out = len(plan.nodes) - len(checked.nodes)
            state.note(
                graph_notes.plan_trimmed_words(state.language, turn, left_out, checked.kinds)
            )
        variables.should_continue = not plan.finish
        if not checked.nodes:
            if not any(n.status is NodeStatus.ANSWERED for n in graph_of(variables).nodes):
                return self._fallback(
                    state, None if plan.finish else graph_notes.plan_unusable_words(state.language)
                )
            return StopReason.PLANNER_STOPPED
        nodes = [
            GraphNode(
                name=n.name, question=n.question, after=n.after, turn=turn, run_id=state.run_id
            )
            for n in checked.nodes
        ]
        graph_of(variables).nodes.extend(nodes)
        variables.next_search_topic = nodes[0].question
        return nodes

    def _fallback(self, state: RunState, note: str | None) -> list[GraphNode] | StopReason:
        """The user's question itself (a short query made from it: :func:`fallback_query`)
        as the one node, when the planner gives nothing first."""
        variables = state.variables
        query = fallback_query(state.topic)
        if state.rounds_done == 0 and find_duplicate(query, variables.topics) is None:
            if note:
                made = query if query != state.topic else None
                state.note(
                    note_words.planner_fallback_words(state.language, note, "question", made)
                )
            names = {n.name for n in graph_of(variables).nodes}
            name = next(f"q{i}" for i in range(1, len(names) + 2) if f"q{i}" not in names)
            node = GraphNode(name=name, question=query, turn=1, run_id=state.run_id, after=[])
            graph_of(variables).nodes.append(node)
            variables.should_continue = False
            return [node]
        if note:
            state.note(note_words.planner_fallback_words(state.language, note, "stopped"))
        return StopReason.PLANNER_FAILED


class _Turn:
    """Runs a turn's nodes: each as soon as its parents are done, at most ``max_parallel``
    searches of the run at once; checkpoints one at a time."""

    def __init__(
        self,
        state: RunState,
        hooks: StepHooks,
        *,
        search: SearchProvider,
        reader: PageReader | None,
        answerer: TextModel,
        max_parallel: int,
        verifier: JsonModel | None = None,
        verify_seconds: float = VERIFY_SECONDS,
        timer: Timer = MONOTONIC,
    ) -> None:
        self._verifier = verifier
        self._verify_seconds = verify_seconds
        self._timer = timer
        self._state = state
        self._hooks = hooks
        self._search_provider = search
        self._reader = reader
        self._answerer = answerer
        self._slots = asyncio.Semaphore(max_parallel)
        self._writing = asyncio.Lock()
        #: The progress text of the turn being run (each node's step repeats it).
        self._text: str | None = None

    async def run(self, nodes: list[GraphNode]) -> None:
        graph = {n.name: n for n in graph_of(self._state.variables).nodes}
        names = {n.name for n in nodes}
        sorter = graphlib.TopologicalSorter(
            {n.name: [p for p in n.after if p in names] for n in nodes}
        )
        sorter.prepare()
        questions = ", ".join(f'"{n.question}"' for n in nodes if n.status is NodeStatus.PENDING)
        self._text = None
        if questions:
            self._text = searching_text(self._state, questions)
            await self._hooks.progress(ProgressKind.SEARCHING, self._text, None)
        running: dict[asyncio.Task[None], str] = {}
        try:
            while sorter.is_active():
                for name in sorter.get_ready():
                    node = graph[name]
                    failed = [p for p in node.after if graph[p].status is NodeStatus.FAILED]
                    if node.status in (NodeStatus.ANSWERED, NodeStatus.FAILED):
                        sorter.done(name)
                    elif failed and node.status is NodeStatus.PENDING:
                        node.status = NodeStatus.FAILED
                        node.error = graph_notes.needs_failed_error(failed[0])
                        sorter.done(name)
                    elif self._hooks.is_cancelled():
                        sorter.done(name)  # left pending, for a resume
                    elif node.status is NodeStatus.PENDING and self._hooks.stop_reason():
                        node.status, node.error = (
                            NodeStatus.FAILED,
                            graph_notes.STOPPED_BEFORE_SEARCH,
                        )
                        sorter.done(name)  # the searching was stopped: not searched
                    else:
                        running[asyncio.create_task(self._node(node, graph))] = name
                if not running:
                    continue
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    sorter.done(running.pop(task))
                    task.result()  # _node handles its failures; anything else is a bug
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)

    async def _checkpoint(self) -> None:
        """Checkpoint a node's step, then show it (the same text: a node's status changed)."""
        async with self._writing:
            await self._hooks.checkpoint(self._state)
        if self._text is not None:
            await self._hooks.progress(ProgressKind.SEARCHING, self._text, None)

    async def _node(self, node: GraphNode, graph: dict[str, GraphNode]) -> None:
        state = self._state
        if node.status is NodeStatus.PENDING:
            async with self._slots:
                if self._hooks.stop_reason() is not None:  # stopped while it waited its turn
                    node.status, node.error = NodeStatus.FAILED, graph_notes.STOPPED_BEFORE_SEARCH
                    return
                finding = await self._search(node)
            state.variables.findings.append(finding)
            state.variables.topics.append(node.question)
            if not finding.results:
                node.status = NodeStatus.FAILED
                node.error = (
                    graph_notes.SEARCH_FAILED_ERROR
                    if finding.error
                    else graph_notes.FOUND_NOTHING_ERROR
                )
                state.note(
                    graph_notes.sub_question_failed_words(state.language, node.question, node.error)
                )
            else:
                node.status = NodeStatus.SEARCHED
            await self._checkpoint()
        if node.status is NodeStatus.SEARCHED:
            try:
                await self._answer(node, graph)
            except Exception as exc:  # one node's answer never fails the run
                log.exception("answering %r failed in run %s", node.question, state.run_id)
                node.status = NodeStatus.FAILED
                node.error = graph_notes.unwritten_error(type(exc).__name__)
                state.note(graph_notes.unanswered_question_words(state.language, node.question))
            await self._checkpoint()

    async def _search(self, node: GraphNode) -> Finding:
        """The node's search and its best pages, as an iterative round has them."""
        finding = await search_topic(
            self._search_provider, self._state, node.question, self._reader
        )
        reader = self._reader
        if reader is not None and reader.pages > 0 and any(not r.internal for r in finding.results):
            reading = PageReading(reader, self._state.topic, [finding])
            try:
                with self._state.usage.timed("reading"):
                    await reading.attach(self._state)
            finally:
                await reading.cancel()  # (a no-op once attached)
        return finding

    async def _answer(self, node: GraphNode, graph: dict[str, GraphNode]) -> None:
        state = self._state
        finding = next(
            (f for f in reversed(state.variables.findings) if f.topic == node.question), None
        )
        numbered = number_sources(state.variables.findings, state.variables.files, node.question)
        own = {source_key(r) for r in (finding.results if finding else [])}
        # The attached files, and the sub-question's own results (internal ones included).
        sources = [s for s in numbered if s.kind == ATTACHMENT or s.key in own]
        parents = [graph[p] for p in node.after if p in graph]
        allowed = {s.n for s in sources}
        for parent in parents:
            allowed |= {int(n) for n in _CITATION.findall(parent.answer or "")}
        messages = node_answer_messages(
            topic=state.topic,
            question=node.question,
            parents=[f"[{p.name}] {p.question} — {p.answer or '(no answer)'}" for p in parents],
            sources=writer_source_blocks(sources),
            today=state.today,
        )
        try:
            with state.usage.timed("answering"):
                answer = await self._answerer.complete(messages, usage=state.usage)
        except LLMError as exc:
            log.warning("answering %r failed in run %s: %s", node.question, state.run_id, exc)
            state.model_failure = exc
            node.status = NodeStatus.FAILED
            node.error = graph_notes.NOT_ANSWERED_ERROR
            state.note(
                graph_notes.unanswered_question_error_words(state.language, node.question, exc)
            )
            return
        state.model_answered = True
        if not answer.complete:
            state.note(
                graph_notes.sub_answer_cut_short_words(
                    state.language, node.question, answer.finish_reason
                )
            )
        cited = cited_body(answer.text, numbered).markdown  # every citation form, as [n]
        checked = await self._verified(_checked_answer(cited, allowed), numbered, node.question)
        node.answer = _checked_answer(checked, allowed)  # (a reviser's sentence is model text)
        node.status = NodeStatus.ANSWERED

    async def _verified(
        self, answer: str, numbered: Sequence[NumberedSource], question: str
    ) -> str:
        """The sub-answer with its claims checked against its sources, as a report's are,
        within the check's time budget, before the writer uses it (unchanged without a
        verifier); a check that left claims unchecked, and sources that speak to AI models,
        are noted."""
        if self._verifier is None:
            return answer
        state = self._state
        cited = {int(n) for n in _CITATION.findall(answer)}
        evidence = evidence_of(s for s in numbered if s.n in cited)
        with state.usage.timed("checking"):
            check = await check_claims(
                answer,
                evidence,
                self._verifier,
                state.usage,
                state.language,
                deadline=Deadline(self._verify_seconds, self._timer),
            )
        if check.partial:
            state.note(
                graph_notes.sub_answer_check_partial_words(
                    state.language, question, check.unchecked, check.reasons
                )
            )
        if check.addressing:
            titles = {s.n: s.title for s in numbered}
            found = [(titles[n], phrase) for n, phrase in check.addressing.items()]
            state.note(note_words.addressing_sources_words(state.language, found))
        return check.markdown or "(no answer)"


def _checked_answer(text: str, allowed: set[int]) -> str:
    """The answer as data: inert, without web addresses, citing only ``allowed`` sources."""
    clean = as_data(clean_text(text))
    clean = _CITATION.sub(lambda m: m.group(0) if int(m.group(1)) in allowed else "", clean)
    clean = " ".join(clean.split())[:ANSWER_CHARS]
    return clean or "(no answer)"


class GraphSettings(EnvSettings):
    """How far a graph run may go."""

    max_nodes: int = Field(default=12, ge=1, le=50, validation_alias=env("FATHOM_GRAPH_MAX_NODES"))
    #: Searches of one graph run at once (the search provider also sits under the process-wide
    #: FATHOM_MAX_PROCESS_SEARCHES).
    max_parallel: int = Field(
        default=10, ge=1, le=10, validation_alias=env("FATHOM_MAX_PARALLEL_SEARCHES")
    )


def _build(tools: StrategyTools, settings: GraphSettings) -> GraphStrategy:
    """Sub-questions are answered by the planner's model."""
    return GraphStrategy(
        tools.planner,
        tools.planner,
        tools.search,
        tools.reader,
        max_parallel=settings.max_parallel,
        max_nodes=settings.max_nodes,
        verifier=tools.verifier,
        verify_seconds=tools.verify_seconds,
        timer=tools.timer,
    )


GRAPH_STRATEGY = RegisteredStrategy(
    name=GRAPH,
    help={
        "en": "split the question into sub-questions and search the independent ones at "
        "the same time",
        "zh": "把问题拆成子问题，同时搜索互不依赖的子问题",
    },
    settings=GraphSettings,
    build=_build,
    prompts=PROMPTS,
    notes=graph_notes.NOTES,
)
