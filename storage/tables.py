"""ORM mapping of the schema that ``migrations/`` creates (keep the two in step)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Dialect,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in, timezone-aware UTC out, also on SQLite (which drops tzinfo)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass timezone-aware datetimes")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


JSONType = JSON().with_variant(JSONB(), "postgresql")

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Thread(Base):
    __tablename__ = "threads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    key: Mapped[str] = mapped_column(String(512), unique=True)
    platform: Mapped[str] = mapped_column(String(32))
    workspace: Mapped[str] = mapped_column(String(255))
    channel: Mapped[str] = mapped_column(String(255))
    thread_ref: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    #: Bumped by each request in the thread; retention prunes threads untouched for long
    #: (migration 0016's index).
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class ThreadVariables(Base):
    __tablename__ = "thread_variables"

    thread_id: Mapped[int] = mapped_column(
        ForeignKey("threads.id", ondelete="CASCADE"), primary_key=True
    )
    topics: Mapped[list[str]] = mapped_column(JSONType, default=list)
    next_search_topic: Mapped[str | None] = mapped_column(Text)
    findings: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    should_continue: Mapped[bool] = mapped_column(Boolean, server_default=false())
    #: Each strategy's own state by the strategy's name (migration 0017), stored as the
    #: strategy serialises it and never read here; None for threads without any.
    strategy_state: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    #: Before migration 0017: the graph strategy's sub-questions, now in ``strategy_state``.
    #: Kept, neither read nor written, for the previous release during a rolling upgrade;
    #: the release after next drops it.
    graph: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONType)
    #: The files attached in the thread, as read (migration 0010); None for threads without.
    files: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONType)
    #: Replies that steered a run while it ran (migration 0012); None for threads without.
    guidance: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONType)
    version: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ResearchRun(Base):
    __tablename__ = "research_runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    thread_id: Mapped[int] = mapped_column(ForeignKey("threads.id", ondelete="CASCADE"), index=True)
    topic: Mapped[str] = mapped_column(Text)
    depth: Mapped[int] = mapped_column(Integer)
    strategy: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), index=True)
    rounds_done: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    requested_by: Mapped[str | None] = mapped_column(String(255), index=True)
    dedupe_key: Mapped[str | None] = mapped_column(String(255), unique=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, server_default=false())
    #: Stop searching and write the report from what was found ("Stop and write now").
    stop_requested: Mapped[bool] = mapped_column(Boolean, server_default=false())
    #: Why its searching ended (``core.engine.state.StopReason``; migration 0015).
    stop_reason: Mapped[str | None] = mapped_column(String(32))
    progress_message_id: Mapped[str | None] = mapped_column(String(255))
    error: Mapped[str | None] = mapped_column(Text)
    notes: Mapped[list[str]] = mapped_column(JSONType, default=list)
    report_markdown: Mapped[str | None] = mapped_column(Text)
    llm_calls: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    prompt_tokens: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    completion_tokens: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    searches: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    pages_read: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    pages_skipped: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    #: Files attached in the chat that were read (migration 0010).
    attachments_read: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    #: Calls to internal sources (MCP servers), and which sources the run searches (``web``,
    #: ``internal`` or ``all``; migration 0011).
    internal_searches: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    #: Model name -> [prompt, completion] tokens (migration 0012); None before any call.
    tokens_by_model: Mapped[dict[str, list[int]] | None] = mapped_column(JSONType)
    # Seconds per step (planning, searching, reading, writing; migration 0013).
    seconds_by_step: Mapped[dict[str, float] | None] = mapped_column(JSONType)
    sources: Mapped[str] = mapped_column(String(16), server_default=text("'all'"))
    # The claim check's model calls and tokens, and how the report's claims held (0018).
    verifier_calls: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    verifier_prompt_tokens: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    verifier_completion_tokens: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    claim_check: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # The run's share of its requester's daily token quota (0020; NULL: no quota applied).
    token_allowance: Mapped[int | None] = mapped_column(Integer)
    # What its long report became on its platform: a document, or refused (0021).
    report_document: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    #: Retention picks runs by it (migration 0016's index).
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    report_posted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Run lifecycle (migration 0004): who holds the run, and the delivery of its outcome.
    owner: Mapped[str | None] = mapped_column(String(255))
    fence: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    attempt: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    delivery: Mapped[str | None] = mapped_column(String(16), index=True)
    report_parts_posted: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    delivery_attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    delivery_error: Mapped[str | None] = mapped_column(Text)
    # What the run's platform needs to deliver it (migration 0005; DingTalk's conversation).
    platform_context: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    # The digest this run is a firing of (migration 0006); its dedupe key names the slot.
    digest_id: Mapped[str | None] = mapped_column(String(16), index=True)
    # The files the request carried, as the platform described them (migration 0010).
    attachments: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONType)

    __table_args__ = (
        # One active run per thread, enforced by the database (see storage.runs.create_run).
        Index(
            "uq_research_runs_active_thread",
            "thread_id",
            unique=True,
            sqlite_where=text("status IN ('queued', 'running')"),
            postgresql_where=text("status IN ('queued', 'running')"),
        ),
    )


class RunSource(Base):
    __tablename__ = "run_sources"
    __table_args__ = (UniqueConstraint("run_id", "n", name="uq_run_sources_run_id_n"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("research_runs.id", ondelete="CASCADE"))
    n: Mapped[int] = mapped_column(Integer)
    title: Mapped[str] = mapped_column(Text)
    url: Mapped[str] = mapped_column(Text)
    #: Its publication date (``YYYY-MM-DD``) when known, and ``web``, ``attachment`` or
    #: ``internal`` (migrations 0010, 0011), with the MCP server of an internal one.
    published: Mapped[str | None] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(16), server_default=text("'web'"))
    server: Mapped[str | None] = mapped_column(String(255))


class SearchCacheEntry(Base):
    __tablename__ = "search_cache"

    provider: Mapped[str] = mapped_column(String(32), primary_key=True)
    query: Mapped[str] = mapped_column(String(1024), primary_key=True)
    results: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class PageCacheEntry(Base):
    """A page's main text (not its HTML), keyed by the SHA-256 of its address."""

    __tablename__ = "page_cache"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    final_url: Mapped[str] = mapped_column(Text)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Digest(Base):
    """A recurring research posted to a channel (migration 0006)."""

    __tablename__ = "digests"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    platform: Mapped[str] = mapped_column(String(32))
    workspace: Mapped[str] = mapped_column(String(255))
    channel: Mapped[str] = mapped_column(String(255))
    topic: Mapped[str] = mapped_column(Text)
    depth: Mapped[int] = mapped_column(Integer)
    strategy: Mapped[str] = mapped_column(String(32))
    cron: Mapped[str] = mapped_column(String(255))
    timezone: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str] = mapped_column(String(255))
    enabled: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    disabled_reason: Mapped[str | None] = mapped_column(Text)
    platform_context: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    #: Which sources its firings search (migration 0011).
    sources: Mapped[str] = mapped_column(String(16), server_default=text("'all'"))

    __table_args__ = (Index("ix_digests_channel", "platform", "workspace", "channel"),)


class Lease(Base):
    """A named lease held by one process at a time (migration 0006): the digest scheduler."""

    __tablename__ = "leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(255))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)


class ChatFile(Base):
    """A file sent to the bot on its own (migration 0010), kept for a short while for the
    request that follows it (DingTalk: the same user's ``/research`` in the conversation;
    Feishu: an @-mention in the same thread). ``scope`` says where it may be taken from."""

    __tablename__ = "chat_files"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(255), index=True)
    #: ``core.models.Attachment`` as JSON (what the platform said of the file; no contents).
    attachment: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class ProcessedEvent(Base):
    """A platform delivery already handled (dedupe of retries across restarts)."""

    __tablename__ = "processed_events"

    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class RunFeedback(Base):
    """One person's vote on a run's report (migration 0013); a second press changes it."""

    __tablename__ = "run_feedback"

    run_id: Mapped[str] = mapped_column(
        ForeignKey("research_runs.id", ondelete="CASCADE"), primary_key=True
    )
    voter: Mapped[str] = mapped_column(String(255), primary_key=True)
    value: Mapped[str] = mapped_column(String(8))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class ConversationContext(Base):
    """What a conversation was opened from, before any run in it (migration 0014): Slack's
    assistant thread context (the channel the user was viewing), kept from the thread's
    ``assistant_thread_started`` / ``..._context_changed`` events for the runs started in it.
    """

    __tablename__ = "conversation_contexts"

    thread_key: Mapped[str] = mapped_column(String(512), primary_key=True)
    context: Mapped[dict[str, Any]] = mapped_column(JSONType)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)


class McpProgress(Base):
    """One state of the progress of a run asked for over MCP (migration 0022), written by the
    ``mcp`` platform's delivery and read by the request handler holding the caller's
    connection (``storage.progress``); ``seq`` counts from 1 in each run."""

    __tablename__ = "mcp_progress"

    run_id: Mapped[str] = mapped_column(
        ForeignKey("research_runs.id", ondelete="CASCADE"), primary_key=True
    )
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


def ours(obj: object, name: str | None, type_: str, reflected: bool, compare_to: object) -> bool:
    """For Alembic's comparisons: procrastinate's tables (``FATHOM_QUEUE=procrastinate``,
    migration 0009) are its own schema, not these models."""
    table = getattr(obj, "table", None)
    names = (name or "", getattr(table, "name", "") or "")
    return not any(n.startswith("procrastinate_") for n in names)
