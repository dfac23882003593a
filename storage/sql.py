"""The SQL pieces more than one store uses: the dialect's ``INSERT ... ON CONFLICT``, keys
fitted to their columns, the query of a run with its thread's key, and rows turned into the
plain records that leave the storage layer.

Transactions are plain functions of a Core ``Connection`` run by
:meth:`~storage.db.Database.run` (no ORM session: less CPU per call).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, cast

from sqlalchemy import Select, Table, bindparam, select
from sqlalchemy.engine import Connection, RowMapping

from core.values import DeliveryState, ReportDocument, RunStatus, SourceChoice, ThreadKey
from storage.errors import RunNotFound
from storage.records import RunRecord, ThreadRecord
from storage.tables import ResearchRun, Thread, ThreadVariables

#: processed_events.key and research_runs.dedupe_key are VARCHAR(255) (see fit_key).
MAX_KEY_CHARS = 255

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)
_variables = cast(Table, ThreadVariables.__table__)

#: A run with its thread's key: the columns of a RunRecord.
SELECT_RUNS: Select[Any] = select(*_runs.c, _threads.c.key.label("thread_key")).join(
    _threads, _threads.c.id == _runs.c.thread_id
)
RUN_BY_ID = SELECT_RUNS.where(_runs.c.id == bindparam("run_id"))
#: The thread's variables, as :func:`variables_dict` reads them.
VARIABLE_COLUMNS = (
    _variables.c.thread_id.label("variables_thread_id"),
    _variables.c.topics,
    _variables.c.next_search_topic,
    _variables.c.findings,
    _variables.c.should_continue,
    _variables.c.strategy_state,
    _variables.c.files,
    _variables.c.guidance,
)


def fit_key(key: str) -> str:
    """A delivery key that fits its 255-character column: a longer one becomes its head and a
    digest of the whole (never a bare truncation, so two long keys do not collide)."""
    if len(key) <= MAX_KEY_CHARS:
        return key
    return key[:180] + "~" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def upsert_for(dialect: str) -> Callable[[Table], Any]:
    """``INSERT`` with ``ON CONFLICT`` support for the connected dialect."""
    if dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


def newest_first(stmt: Select[Any]) -> Select[Any]:
    return stmt.order_by(_runs.c.created_at.desc(), _runs.c.id.desc())


def one_run(conn: Connection, stmt: Select[Any], **params: Any) -> RunRecord | None:
    row = conn.execute(stmt, params).mappings().first()
    return None if row is None else run_record(row)


def require_run(conn: Connection, run_id: str) -> RunRecord:
    record = one_run(conn, RUN_BY_ID, run_id=run_id)
    if record is None:
        raise RunNotFound(run_id)
    return record


def variables_dict(row: RowMapping) -> dict[str, Any]:
    """The thread's variables under their contract names (topics, nextSearchTopic, ...)."""
    return {
        "topics": list(row["topics"]),
        "nextSearchTopic": row["next_search_topic"],
        "findings": list(row["findings"]),
        "shouldContinue": row["should_continue"],
        "strategyState": dict(row["strategy_state"] or {}),
        "files": list(row["files"] or []),
        "guidance": list(row["guidance"] or []),
    }


def thread_record(row: RowMapping) -> ThreadRecord:
    return ThreadRecord(
        id=row["id"],
        key=row["key"],
        platform=row["platform"],
        workspace=row["workspace"],
        channel=row["channel"],
        thread_ref=row["thread_ref"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def run_record(row: Mapping[Any, Any]) -> RunRecord:
    return RunRecord(
        id=row["id"],
        thread_id=row["thread_id"],
        thread_key=row["thread_key"],
        thread=ThreadKey.parse(row["thread_key"]),
        topic=row["topic"],
        depth=row["depth"],
        strategy=row["strategy"],
        status=RunStatus(row["status"]),
        rounds_done=row["rounds_done"],
        requested_by=row["requested_by"],
        dedupe_key=row["dedupe_key"],
        cancel_requested=bool(row["cancel_requested"]),
        progress_message_id=row["progress_message_id"],
        error=row["error"],
        notes=list(row["notes"]),
        report_markdown=row["report_markdown"],
        llm_calls=row["llm_calls"],
        prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"],
        searches=row["searches"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        heartbeat_at=row["heartbeat_at"],
        report_posted_at=row["report_posted_at"],
        owner=row["owner"],
        fence=row["fence"],
        attempt=row["attempt"],
        delivery=DeliveryState(row["delivery"]) if row["delivery"] is not None else None,
        report_parts_posted=row["report_parts_posted"],
        delivery_attempts=row["delivery_attempts"],
        delivery_error=row["delivery_error"],
        platform_context=row["platform_context"],
        digest_id=row["digest_id"],
        pages_read=row["pages_read"],
        pages_skipped=row["pages_skipped"],
        attachments_read=row["attachments_read"],
        attachments=row["attachments"],
        internal_searches=row["internal_searches"],
        tokens_by_model=dict(row["tokens_by_model"] or {}),
        seconds_by_step=dict(row["seconds_by_step"] or {}),
        sources=_source_choice(row["sources"]),
        stop_requested=bool(row["stop_requested"]),
        stop_reason=row["stop_reason"],
        verifier_calls=row["verifier_calls"],
        verifier_prompt_tokens=row["verifier_prompt_tokens"],
        verifier_completion_tokens=row["verifier_completion_tokens"],
        claim_check=row["claim_check"],
        token_allowance=row["token_allowance"],
        report_document=_report_document(row["report_document"]),
    )


def _report_document(value: Any) -> ReportDocument | None:
    """A run's stored ``report_document``; one no release wrote (a hand-edited row) is read as
    none, so the delivery takes its document step again rather than failing."""
    if not value:
        return None
    try:
        return ReportDocument.model_validate(value)
    except ValueError:
        return None


def _source_choice(value: str | None) -> SourceChoice:
    """A run's stored ``sources``; a value no release wrote (a hand-edited row) searches
    everything, as the request's default does."""
    try:
        return SourceChoice(value or "")
    except ValueError:
        return SourceChoice.ALL
