"""The documents a platform made for runs' reports (``research_runs.report_document``: a Slack
canvas, a Feishu cloud document), read before those runs are deleted (``fathom forget``,
retention), so that what deletes the rows can have the documents deleted on their platform
too, or say which are left there.

A run whose platform refused documents (its report went as parts), and a stored value no
release wrote, name no document.
"""

from __future__ import annotations

from typing import NamedTuple, cast

from sqlalchemy import ColumnElement, Table, select
from sqlalchemy.engine import Connection

from core.values import ReportDocument, ThreadKey
from storage.tables import ResearchRun, Thread

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)


class RunDocument(NamedTuple):
    """A document made for a run's report: the run's thread, and the document."""

    thread: ThreadKey
    document: ReportDocument


def documents_of(conn: Connection, runs: ColumnElement[bool]) -> dict[str, RunDocument]:
    """The documents of the runs ``runs`` selects (a condition on ``research_runs``), by run
    id."""
    query = (
        select(_runs.c.id, _threads.c.key, _runs.c.report_document)
        .join(_threads, _threads.c.id == _runs.c.thread_id)
        .where(runs, _runs.c.report_document.is_not(None))
    )
    found: dict[str, RunDocument] = {}
    for run_id, key, value in conn.execute(query):
        try:
            document = ReportDocument.model_validate(value)
            thread = ThreadKey.parse(str(key))
        except ValueError:
            continue
        if document.refused or not document.id:
            continue
        found[str(run_id)] = RunDocument(thread, document)
    return found
