"""Value types shared by the engine, the storage layer and the adapters.

Everything that crosses a boundary (LLM answers, search results, persisted
variables, requests from platforms) is a pydantic model so it is validated where
it enters.
"""

from __future__ import annotations

import contextlib
import enum
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.text import clean_text, has_visible
from core.untrusted import neutralise


def utcnow() -> datetime:
    return datetime.now(UTC)


class SearchResult(BaseModel):
    """One search hit, normalised across providers: a web result, or (``server`` set) a
    document an internal source (an MCP server, :mod:`core.knowledge`) returned."""

    model_config = ConfigDict(frozen=True)

    title: str
    #: A web result's address; an internal document's link or URI as its server gave it (any
    #: scheme, or empty). Page reading never fetches an internal one.
    url: str
    snippet: str = ""
    #: Its publication date (``YYYY-MM-DD``) when the provider gives one.
    published: str | None = None
    #: The configured name of the MCP server that returned it (None: the web).
    server: str | None = None
    #: An internal document's passages that matter for the search (the server's text is its
    #: content: BM25-selected within the page budget, neutralised like page passages).
    passages: list[str] = Field(default_factory=list)

    @property
    def internal(self) -> bool:
        return self.server is not None


class PageExcerpt(BaseModel):
    """What was kept of one result page: the passages that matter for the search (main text
    only, neutralised like snippets), in the page's order."""

    model_config = ConfigDict(frozen=True)

    url: str
    passages: list[str] = Field(default_factory=list)
    #: The date the page declares it was published (``YYYY-MM-DD``), when it declares one.
    published: str | None = None
    #: Of a long PDF read in part, which pages (``read pages 1-50 of 311``).
    coverage: str | None = None


class Finding(BaseModel):
    """The outcome of searching one topic: its results, or why there are none.

    ``pages`` holds the passages read from the best result pages; None while they have not
    been read (reading is off, or the run stopped before it finished reading them).
    """

    topic: str
    results: list[SearchResult] = Field(default_factory=list)
    error: str | None = None
    searched_at: datetime = Field(default_factory=utcnow)
    pages: list[PageExcerpt] | None = None


#: :attr:`Attachment.attacher_id` of a file whose attacher's id the platform did not give.
UNKNOWN_ATTACHER = "?"


class Attachment(BaseModel):
    """A file attached to a chat request, as its platform described it (not its contents).

    Recorded with the run when the request arrives; the run downloads it when it executes,
    through its platform's delivery (:meth:`core.operations.job.Delivery.download`), with the
    platform's credentials and from the platform's own hosts only.
    """

    model_config = ConfigDict(frozen=True)

    #: The platform's id of the file (Slack's file id, Feishu's ``file_key``, DingTalk's
    #: ``downloadCode``): a thread reads a file once, whatever the requests that carry it.
    id: str
    name: str
    #: The media type the platform gives, and the size in bytes when it gives one.
    mime: str | None = None
    size: int | None = None
    #: The platform's link to the file (shown in the report's sources), when it has one.
    url: str | None = None
    #: Who attached it, as the report names them (a display name, else the platform's id).
    attached_by: str = ""
    #: Who attached it, by their id on the platform (the last part of their requester key),
    #: kept beside any display name: ``fathom forget`` finds their files by it. Empty until
    #: the chat layer names the message's sender; :data:`UNKNOWN_ATTACHER` where the platform
    #: names another person without their id (a DingTalk quote without its sender's id).
    attacher_id: str = ""
    #: The message that carries the file (Feishu's resource API needs it).
    message_id: str | None = None
    #: Whatever else the platform's download needs (e.g. Slack's ``url_private_download``).
    extra: dict[str, str] = Field(default_factory=dict)


class AttachedFile(BaseModel):
    """An attached file as read, kept with the thread's variables: follow-ups in the thread
    reuse its text without downloading it again. The text is untrusted like any page."""

    id: str
    name: str
    #: ``pdf``, ``docx``, ``html`` or ``text`` (Markdown and plain text).
    kind: str
    size: int
    url: str | None = None
    attached_by: str = ""
    #: The attacher's id on the platform (:attr:`Attachment.attacher_id`).
    attacher_id: str = ""
    #: Pages read (a PDF), and the pages it has; of one read in part, which pages
    #: (``read pages 1-50 of 311``).
    pages_read: int | None = None
    pages_total: int | None = None
    coverage: str | None = None
    #: Its own title, where it names one that says more than its file name (an HTML file's
    #: ``<title>``).
    title: str | None = None
    published: str | None = None
    text: str = ""
    run_id: str = ""
    read_at: datetime = Field(default_factory=utcnow)
    #: How many findings the thread had when it was read: its place among the sources (a
    #: source's number must not move as the thread grows; clocks cannot tell the order).
    findings_before: int = 0


#: The strategy of a run nobody chose one for (``FATHOM_STRATEGY``'s default).
DEFAULT_STRATEGY = "iterative"


class StrategyState(BaseModel):
    """A strategy's own part of a thread's variables, kept under its name in
    :attr:`ThreadVariables.strategy_state` (one JSON object of the thread in storage, which
    knows nothing of what is in it). ``of(variables)`` is the state of one thread, read once
    and then changed in place, so a checkpoint stores what the strategy did."""

    #: The strategy's name: where its state is kept.
    key: ClassVar[str]

    @classmethod
    def of(cls, variables: ThreadVariables) -> Self:
        held = variables.strategy_state.get(cls.key)
        if isinstance(held, cls):
            return held
        state = cls.model_validate(held or {})
        variables.strategy_state[cls.key] = state
        return state

    def absorb(self, stored: Self) -> None:
        """Take in what another writer stored meanwhile (:meth:`ThreadVariables.absorb`);
        by default this copy's state stands."""


class Guidance(BaseModel):
    """A reply in a thread while its research ran: the user's own words steering it (shown
    to that run's planner from its next round, and to its writer)."""

    run_id: str
    by: str
    at: datetime
    text: str
    #: The delivery's dedupe key: a reply delivered twice (two replicas) is kept once.
    key: str | None = None
    #: The person's name as their platform gave it with the reply (Teams' ``from.name``),
    #: made inert; None where the platform gives only an id.
    name: str | None = None

    def line(self) -> str:
        """``<text> (U123, 14:02 UTC)``: how the planner, the writer and the report's notes
        show it, the person named by their name when the platform gave one, else by their id
        on the platform (``by`` is the requester key, ``<platform>:<workspace>:<user id>``;
        a user id may itself hold colons)."""
        who = self.name or self.by.split(":", 2)[-1]
        return f"{self.text} ({who}, {self.at.astimezone(UTC):%H:%M} UTC)"


class ThreadVariables(BaseModel):
    """The conversation variables persisted per thread after every step.

    ``strategy_state`` (``strategyState``) holds each strategy's own state by its name (the
    graph strategy's sub-questions under ``graph``; iterative research keeps none): a
    :class:`StrategyState` once a strategy has read it, its stored JSON until then.
    """

    model_config = ConfigDict(populate_by_name=True)

    topics: list[str] = Field(default_factory=list)
    next_search_topic: str | None = Field(default=None, alias="nextSearchTopic")
    findings: list[Finding] = Field(default_factory=list)
    should_continue: bool = Field(default=True, alias="shouldContinue")
    strategy_state: dict[str, Any] = Field(default_factory=dict, alias="strategyState")
    #: The files attached in the thread that were read (their text, for every later run).
    files: list[AttachedFile] = Field(default_factory=list)
    #: Replies that steered a run of the thread while it ran (who, when, what).
    guidance: list[Guidance] = Field(default_factory=list)

    def guidance_for(self, run_id: str) -> list[str]:
        """The guidance given during run ``run_id``, one line each, in order."""
        return [g.line() for g in self.guidance if g.run_id == run_id]

    def public_dict(self) -> dict[str, object]:
        """The variables under their contract names (``nextSearchTopic`` ...)."""
        return self.model_dump(mode="json", by_alias=True)

    def absorb(self, stored: ThreadVariables) -> None:
        """Take in what another writer stored meanwhile: its topics and findings that this
        copy lacks go in front of this copy's own (which stay last, in order). The planned
        ``nextSearchTopic`` and ``shouldContinue`` stay this copy's."""
        known = set(self.topics)
        topics = [t for t in stored.topics if t not in known]
        seen = {(f.topic, f.searched_at) for f in self.findings}
        findings = [f for f in stored.findings if (f.topic, f.searched_at) not in seen]
        self.topics[:0] = topics
        self.findings[:0] = findings
        for name, theirs in stored.strategy_state.items():
            mine = self.strategy_state.get(name)
            if mine is None:
                self.strategy_state[name] = theirs
            elif isinstance(mine, StrategyState):
                mine.absorb(type(mine).model_validate(_plain(theirs)))
        ids = {file.id for file in self.files}
        self.files[:0] = [file for file in stored.files if file.id not in ids]
        given = {(g.by, g.at, g.text) for g in self.guidance}
        fresh = [g for g in stored.guidance if (g.by, g.at, g.text) not in given]
        self.guidance = sorted(self.guidance + fresh, key=lambda g: g.at)


def _plain(state: object) -> object:
    """A strategy's state as JSON, whether it was read into its model or not."""
    return state.model_dump(mode="json") if isinstance(state, BaseModel) else state


class PlannerDecision(BaseModel):
    """What the planner model answers each round."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    next_search_topic: str | None = Field(default=None, alias="nextSearchTopic")
    should_continue: bool = Field(alias="shouldContinue")

    @field_validator("next_search_topic")
    @classmethod
    def _clean_topic(cls, value: str | None) -> str | None:
        """Model output is untrusted: no control characters or live mentions; blank is None."""
        if value is None:
            return None
        value = " ".join(neutralise(clean_text(value)).split())
        return value if has_visible(value) else None


class Usage(BaseModel):
    """Counters of one run; the LLM and search clients add to them."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    searches: int = 0
    #: Result pages read (their passages kept), and pages not read or with nothing relevant.
    pages_read: int = 0
    pages_skipped: int = 0
    #: Files attached in the chat that were read.
    attachments_read: int = 0
    #: Calls to internal sources (MCP servers), one per server per search.
    internal_searches: int = 0
    #: The claim check's share of the model counters above (its verifier and reviser
    #: calls, :mod:`core.claims`): counted in them too.
    verifier_calls: int = 0
    verifier_prompt_tokens: int = 0
    verifier_completion_tokens: int = 0
    #: Model name -> [prompt tokens, completion tokens] (what FATHOM_PRICES prices).
    tokens_by_model: dict[str, list[int]] = Field(default_factory=dict)
    #: Seconds spent in each step (``planning``, ``searching``, ``reading``: waiting for
    #: pages, ``answering``: a graph run's sub-questions, ``writing``), summed over its calls;
    #: steps that run side by side overlap, so the sum can exceed the run's duration.
    seconds_by_step: dict[str, float] = Field(default_factory=dict)

    @contextlib.contextmanager
    def timed(self, step: str) -> Iterator[None]:
        """Add the time the block takes to ``step``."""
        started = time.monotonic()
        try:
            yield
        finally:
            spent = self.seconds_by_step.get(step, 0.0) + time.monotonic() - started
            self.seconds_by_step[step] = round(spent, 3)

    def count_tokens(self, model: str, prompt: int, completion: int) -> None:
        """One model call's tokens, in the totals and under its model."""
        self.prompt_tokens += prompt
        self.completion_tokens += completion
        tally = self.tokens_by_model.setdefault(model, [0, 0])
        tally[0] += prompt
        tally[1] += completion

    def add(self, other: Usage) -> None:
        self.llm_calls += other.llm_calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.searches += other.searches
        self.pages_read += other.pages_read
        self.pages_skipped += other.pages_skipped
        self.attachments_read += other.attachments_read
        self.internal_searches += other.internal_searches
        self.verifier_calls += other.verifier_calls
        self.verifier_prompt_tokens += other.verifier_prompt_tokens
        self.verifier_completion_tokens += other.verifier_completion_tokens
        for model, (prompt, completion) in other.tokens_by_model.items():
            tally = self.tokens_by_model.setdefault(model, [0, 0])
            tally[0] += prompt
            tally[1] += completion
        for step, seconds in other.seconds_by_step.items():
            self.seconds_by_step[step] = round(self.seconds_by_step.get(step, 0.0) + seconds, 3)

    def add_checking(self, other: Usage) -> None:
        """Add the model calls of a claim check (``other``: its own counters), to the totals
        and to the verifier's share."""
        self.add(other)
        self.verifier_calls += other.llm_calls
        self.verifier_prompt_tokens += other.prompt_tokens
        self.verifier_completion_tokens += other.completion_tokens


class SourceKind(enum.StrEnum):
    """Where a report's source came from."""

    WEB = "web"
    #: A file attached in the chat (``url``: the platform's link to it, empty when none).
    ATTACHMENT = "attachment"
    #: A document an internal source (an MCP server) returned (``server`` names it).
    INTERNAL = "internal"


class Source(BaseModel):
    """A numbered source of one run's report: a web page, a file attached in the chat, or an
    internal document (``kind``, :class:`SourceKind`)."""

    n: int
    title: str
    url: str
    published: str | None = None
    kind: str = SourceKind.WEB.value
    #: The MCP server an internal source came from.
    server: str | None = None


#: The platform of console threads (``cli:local:local:<id>``): the report goes to the terminal
#: that asked, so a finished console run has nothing to deliver to a chat.
CONSOLE_PLATFORM = "cli"
