"""A privacy request: forget one person (``fathom forget --user <platform>:<workspace>:<id>``).

:meth:`ForgetStore.forget` deletes, in one transaction, what names the person by their
requester key (``slack:T0001:U0002``, as runs, votes and digests record it) or their id on
the platform (``U0002``, as guidance, notes and attached files name them):

- their runs (with their sources and every vote on them), and threads left without a run;
- their votes on other people's reports;
- their guidance in other people's threads, and the report notes that quote it;
- the digests they scheduled (their firings are their runs);
- files they attached: in threads' variables and waiting for a request, deleted; cited in
  other people's reports, the citation no longer names them.

A run of theirs that is still queued, running or posting its outcome, and a thread whose run
is going on (its variables are in a runner's hands), are left as they are and reported
(:attr:`Forgotten.busy`): the caller cancels them and asks again once they have ended.
What a platform keeps of the person in tables of its own (Slack's installations) is its to
report (``ChatPlatform.kept_of``): ``fathom forget`` asks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, delete, select, update
from sqlalchemy.engine import Connection

from storage.db import Database
from storage.sql import fit_key
from storage.tables import (
    ChatFile,
    Digest,
    ResearchRun,
    RunFeedback,
    RunSource,
    Thread,
    ThreadVariables,
)
from storage.values import FINISHED_STATUSES, UNFINISHED_STATUSES, DeliveryState

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)
_variables = cast(Table, ThreadVariables.__table__)
_sources = cast(Table, RunSource.__table__)
_feedback = cast(Table, RunFeedback.__table__)
_digests = cast(Table, Digest.__table__)
_files = cast(Table, ChatFile.__table__)

#: What replaces the person where a report cites a file they attached.
FORGOTTEN = "(forgotten)"


class NotARequesterKey(ValueError):
    """The person is not given as ``<platform>:<workspace>:<user id>``."""


@dataclass(frozen=True)
class Person:
    """Someone to forget: their requester key and their id on the platform."""

    key: str
    platform: str
    user_id: str

    @classmethod
    def parse(cls, key: str) -> Person:
        parts = key.strip().split(":", 2)
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise NotARequesterKey(
                f"{key!r} is not a requester key <platform>:<workspace>:<user id> "
                "(e.g. slack:T0001:U0002, as `fathom thread show` and `fathom feedback list` "
                "show it)"
            )
        return cls(key=":".join(parts), platform=parts[0], user_id=parts[2])


@dataclass(frozen=True)
class Forgotten:
    """What :meth:`ForgetStore.forget` deleted, and what it had to leave for later."""

    runs: int = 0
    threads: int = 0
    votes: int = 0
    guidance: int = 0
    digests: int = 0
    files: int = 0
    #: Runs of theirs still going on (or posting), and runs going on in threads holding their
    #: guidance or files: cancel them, then forget again.
    busy: tuple[str, ...] = ()


class ForgetStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def unfinished_runs(self, person: Person) -> list[str]:
        """Their runs still queued or running (to cancel before forgetting)."""
        stmt = select(_runs.c.id).where(
            _runs.c.requested_by == person.key, _runs.c.status.in_(UNFINISHED_STATUSES)
        )
        return await self._db.run(lambda conn: [str(i) for i in conn.execute(stmt).scalars()])

    async def forget(self, person: Person) -> Forgotten:
        """Delete what names ``person`` (see the module docstring)."""
        return await self._db.run(lambda conn: _Forgetting(conn, person).run())


class _Forgetting:
    """One forget, in one transaction."""

    def __init__(self, conn: Connection, person: Person) -> None:
        self.conn = conn
        self.person = person
        self.busy: list[str] = []

    def run(self) -> Forgotten:
        runs, threads = self._runs()
        guidance, attached = self._variables()
        attached += self._waiting_files()
        self._citations()
        digests = self.conn.execute(
            delete(_digests).where(_digests.c.created_by == self.person.key)
        ).rowcount
        votes = self.conn.execute(
            delete(_feedback).where(_feedback.c.voter == fit_key(self.person.key))
        ).rowcount
        return Forgotten(
            runs=runs,
            threads=threads,
            votes=votes,
            guidance=guidance,
            digests=digests,
            files=attached,
            busy=tuple(sorted(set(self.busy))),
        )

    def _runs(self) -> tuple[int, int]:
        """Their finished runs deleted, then the threads those leave without a run."""
        conn, key = self.conn, self.person.key
        rows = conn.execute(
            select(_runs.c.id, _runs.c.thread_id, _runs.c.status, _runs.c.delivery).where(
                _runs.c.requested_by == key
            )
        ).all()
        done = [
            r for r in rows if r.status in FINISHED_STATUSES and r.delivery != DeliveryState.PENDING
        ]
        self.busy += [str(r.id) for r in rows if r not in done]
        if not done:
            return 0, 0
        runs = conn.execute(delete(_runs).where(_runs.c.id.in_([r.id for r in done]))).rowcount
        touched = {r.thread_id for r in done}
        has_run = select(_runs.c.id).where(_runs.c.thread_id == _threads.c.id).exists()
        threads = conn.execute(
            delete(_threads).where(_threads.c.id.in_(touched), ~has_run)
        ).rowcount
        return runs, threads

    def _variables(self) -> tuple[int, int]:
        """Their guidance and files taken out of threads' variables, and the notes of the
        runs that quote that guidance."""
        conn, person = self.conn, self.person
        rows = conn.execute(
            select(_variables.c.thread_id, _variables.c.guidance, _variables.c.files).where(
                _variables.c.guidance.is_not(None) | _variables.c.files.is_not(None)
            )
        ).all()
        guidance = files = 0
        for thread_id, given, attached in rows:
            mine = [g for g in given or [] if g.get("by") == person.key]
            theirs = [f for f in attached or [] if f.get("attached_by") == person.user_id]
            if not mine and not theirs:
                continue
            active = conn.execute(
                select(_runs.c.id).where(
                    _runs.c.thread_id == thread_id, _runs.c.status.in_(UNFINISHED_STATUSES)
                )
            ).scalars()
            going = [str(i) for i in active]
            if going:  # its runner writes the variables back: later
                self.busy += going
                continue
            conn.execute(
                update(_variables)
                .where(_variables.c.thread_id == thread_id)
                .values(
                    guidance=[g for g in given or [] if g not in mine] or None,
                    files=[f for f in attached or [] if f not in theirs] or None,
                    version=_variables.c.version + 1,
                )
            )
            guidance, files = guidance + len(mine), files + len(theirs)
            for entry in mine:
                self._unquote(str(entry.get("run_id", "")), _guidance_quote(entry, person.user_id))
        return guidance, files

    def _unquote(self, run_id: str, line: str) -> None:
        """The run's notes, and its report's lines, that quote ``line`` are removed."""
        row = self.conn.execute(
            select(_runs.c.notes, _runs.c.report_markdown).where(_runs.c.id == run_id)
        ).first()
        if row is None:
            return
        notes = [n for n in row.notes or [] if line not in n]
        report = row.report_markdown
        if report is not None:
            report = "\n".join(x for x in report.split("\n") if line not in x)
        self.conn.execute(
            update(_runs).where(_runs.c.id == run_id).values(notes=notes, report_markdown=report)
        )

    def _waiting_files(self) -> int:
        """Files they sent that wait for a request (kept a day at most)."""
        person = self.person
        doomed = [
            file_id
            for file_id, scope, attachment in self.conn.execute(
                select(_files.c.id, _files.c.scope, _files.c.attachment)
            )
            if (scope.startswith(f"{person.platform}:") and scope.endswith(f":{person.user_id}"))
            or (attachment or {}).get("attached_by") == person.user_id
        ]
        if not doomed:
            return 0
        return int(self.conn.execute(delete(_files).where(_files.c.id.in_(doomed))).rowcount)

    def _citations(self) -> None:
        """Other people's runs that read a file they attached: the file, its citation and
        the report no longer name them."""
        conn, user = self.conn, self.person.user_id
        named = f"attached by {user}"
        cited = conn.execute(
            select(_sources.c.id, _sources.c.run_id, _sources.c.title).where(
                _sources.c.kind == "attachment", _sources.c.title.contains(named, autoescape=True)
            )
        ).all()
        runs: set[str] = set()
        for source_id, run_id, title in cited:
            conn.execute(
                update(_sources)
                .where(_sources.c.id == source_id)
                .values(title=title.replace(named, f"attached by {FORGOTTEN}"))
            )
            runs.add(str(run_id))
        carried = conn.execute(
            select(_runs.c.id, _runs.c.attachments).where(_runs.c.attachments.is_not(None))
        ).all()
        for run_id, attachments in carried:
            if any(a.get("attached_by") == user for a in attachments or []):
                kept = [
                    {**a, "attached_by": ""} if a.get("attached_by") == user else a
                    for a in attachments
                ]
                conn.execute(update(_runs).where(_runs.c.id == run_id).values(attachments=kept))
                runs.add(str(run_id))
        for run_id in runs:
            row = conn.execute(
                select(_runs.c.notes, _runs.c.report_markdown).where(_runs.c.id == run_id)
            ).one()
            conn.execute(
                update(_runs)
                .where(_runs.c.id == run_id)
                .values(
                    notes=[_unnamed(n, named) for n in row.notes or []],
                    report_markdown=None
                    if row.report_markdown is None
                    else _unnamed(row.report_markdown, named),
                )
            )


def _unnamed(text: str, named: str) -> str:
    return text.replace(named, f"attached by {FORGOTTEN}")


def _guidance_quote(entry: dict[str, Any], user_id: str) -> str:
    """What every note quoting this guidance holds: its text and then the person's name as
    their platform gave it, else their id (``core.models.Guidance.line``: ``<text> (<name or
    id>, 14:02 UTC)``)."""
    return f"{entry.get('text', '')} ({entry.get('name') or user_id}, "
