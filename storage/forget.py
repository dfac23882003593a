"""A privacy request: forget one person (``fathom forget --user <platform>:<workspace>:<id>``).

:meth:`ForgetStore.forget` deletes, in one transaction, what names the person by their
requester key (``slack:T0001:U0002``, as runs, votes and digests record it) or their id on
the platform (``U0002``, as guidance, notes and attached files name them):

- their runs (with their sources and every vote on them), and threads left without a run;
- in a thread that outlives their runs (someone else's research goes on there): what their
  runs added to its variables, the topics they searched (their runs' topics, the findings
  searched while their runs ran, their sub-questions of the graph strategy) with those
  findings, and the files their runs read;
- their votes on other people's reports;
- their guidance in other people's threads, and the report notes that quote it;
- the digests they scheduled (their firings are their runs);
- files they attached, matched by the attacher's platform id (``attacher_id``, kept beside
  any display name), by their id where the name is one, or by a link naming their id (a
  Slack permalink ``https://<ws>.slack.com/files/<user id>/<file id>/<name>``): in threads'
  variables and waiting for a request, deleted; cited in other people's reports, the
  citation names neither them nor the link (which carries their id);
- the search results cached for the topics they searched, and the pages cached for the
  results of those searches and their runs' sources.

A run of theirs that is still queued, running or posting its outcome, and a thread whose run
is going on (its variables are in a runner's hands), are left as they are and reported
(:attr:`Forgotten.busy`): the caller cancels them and asks again once they have ended.
What a platform keeps of the person in tables of its own (Slack's installations) is its to
report (``ChatPlatform.kept_of``): ``fathom forget`` asks it. The documents a platform made
for their deleted runs' reports (a Slack canvas, a Feishu cloud document) are read before the
runs go and returned (:attr:`Forgotten.documents`): ``fathom forget`` deletes them on their
platform, or names those it could not.

With ``dry_run`` the same work runs and is rolled back: the counts say what would go. On
SQLite the transaction runs with ``PRAGMA secure_delete`` (freed pages and cells are
overwritten with zeros) and is followed by ``PRAGMA wal_checkpoint(TRUNCATE)``, so the
database file and its WAL no longer hold the deleted text. PostgreSQL keeps dead row
versions until ``VACUUM`` reclaims them (docs/operations.md).
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Table, delete, func, select, update
from sqlalchemy.engine import Connection

from core.values import FINISHED_STATUSES, UNFINISHED_STATUSES, DeliveryState
from storage.caches import _page_key
from storage.db import Database
from storage.run_documents import RunDocument, documents_of
from storage.sql import fit_key
from storage.tables import (
    ChatFile,
    Digest,
    PageCacheEntry,
    ResearchRun,
    RunFeedback,
    RunSource,
    SearchCacheEntry,
    Thread,
    ThreadVariables,
)

_runs = cast(Table, ResearchRun.__table__)
_threads = cast(Table, Thread.__table__)
_variables = cast(Table, ThreadVariables.__table__)
_sources = cast(Table, RunSource.__table__)
_feedback = cast(Table, RunFeedback.__table__)
_digests = cast(Table, Digest.__table__)
_files = cast(Table, ChatFile.__table__)
_search_cache = cast(Table, SearchCacheEntry.__table__)
_page_cache = cast(Table, PageCacheEntry.__table__)

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
    """What :meth:`ForgetStore.forget` deleted (or, dry, would delete), and what it had to
    leave for later."""

    runs: int = 0
    threads: int = 0
    votes: int = 0
    guidance: int = 0
    digests: int = 0
    files: int = 0
    #: Topics (with the findings searched for them) taken out of threads that outlive the
    #: person's runs.
    topics: int = 0
    #: Citations of their files in other people's reports, rewritten.
    citations: int = 0
    #: Search results and page texts cached for their searches, deleted.
    cached: int = 0
    #: Runs of theirs still going on (or posting), and runs going on in threads holding their
    #: guidance or files: cancel them, then forget again.
    busy: tuple[str, ...] = ()
    #: Rows deleted or rewritten, by table (a run's sources and votes deleted with it
    #: counted in their own tables).
    rows: Mapping[str, int] = field(default_factory=dict)
    #: On SQLite: whether the WAL was checkpointed and emptied after the forget (False: a
    #: reader held it; the next checkpoint does it). None elsewhere, and when dry.
    wal_truncated: bool | None = None
    #: The documents their deleted runs' reports became on their platform (to delete there).
    documents: tuple[RunDocument, ...] = ()

    @property
    def nothing(self) -> bool:
        """No row names the person, and nothing of theirs is going on."""
        return not any(self.rows.values()) and not self.busy


class _DryRun(Exception):
    """Not an error: how a dry run rolls its work back, carrying its counts."""

    def __init__(self, done: Forgotten) -> None:
        super().__init__("dry run")
        self.done = done


class ForgetStore:
    def __init__(self, database: Database) -> None:
        self._db = database

    async def unfinished_runs(self, person: Person) -> list[str]:
        """Their runs still queued or running (to cancel before forgetting)."""
        stmt = select(_runs.c.id).where(
            _runs.c.requested_by == person.key, _runs.c.status.in_(UNFINISHED_STATUSES)
        )
        return await self._db.run(lambda conn: [str(i) for i in conn.execute(stmt).scalars()])

    async def forget(self, person: Person, *, dry_run: bool = False) -> Forgotten:
        """Delete what names ``person`` (see the module docstring); with ``dry_run``, only
        count it."""
        sqlite = self._db.dialect == "sqlite"

        def work(conn: Connection) -> Forgotten:
            if sqlite and not dry_run:
                conn.exec_driver_sql("PRAGMA secure_delete=ON")
            done = _Forgetting(conn, person).run()
            if dry_run:
                raise _DryRun(done)
            return done

        try:
            done = await self._db.run(work)
        except _DryRun as dry:
            return dry.done
        if not sqlite:
            return done
        checkpoint = await self._db.run(_checkpoint)
        return replace(done, wal_truncated=checkpoint)


def _checkpoint(conn: Connection) -> bool:
    """``PRAGMA wal_checkpoint(TRUNCATE)``: True when the WAL was written back and emptied."""
    conn.exec_driver_sql("PRAGMA secure_delete=OFF")
    row = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").first()
    return row is not None and row[0] == 0


@dataclass
class _Runs:
    """The person's runs being deleted: what they added to threads that outlive them."""

    ids: set[str] = field(default_factory=set)
    #: By thread: the topics their runs searched there, and when their runs ran there.
    topics: dict[int, set[str]] = field(default_factory=dict)
    windows: dict[int, list[tuple[datetime, datetime]]] = field(default_factory=dict)
    urls: set[str] = field(default_factory=set)


class _Forgetting:
    """One forget, in one transaction."""

    def __init__(self, conn: Connection, person: Person) -> None:
        self.conn = conn
        self.person = person
        self.busy: list[str] = []
        self.rows: Counter[str] = Counter()
        self.theirs = _Runs()
        #: Their files' links and the names they were attached under (found before any is
        #: deleted): a citation naming either is theirs.
        self.links: set[str] = set()
        self.names: set[str] = {person.user_id}
        self.documents: list[RunDocument] = []

    def count(self, table: Table, rows: int | None) -> int:
        self.rows[table.name] += int(rows or 0)
        return int(rows or 0)

    def run(self) -> Forgotten:
        self._their_files()
        runs, threads = self._runs()
        guidance, attached, topics = self._variables()
        attached += self._waiting_files()
        citations = self._citations()
        cached = self._caches()
        digests = self.count(
            _digests,
            self.conn.execute(
                delete(_digests).where(_digests.c.created_by == self.person.key)
            ).rowcount,
        )
        votes = self.count(
            _feedback,
            self.conn.execute(
                delete(_feedback).where(_feedback.c.voter == fit_key(self.person.key))
            ).rowcount,
        )
        return Forgotten(
            runs=runs,
            threads=threads,
            votes=votes,
            guidance=guidance,
            digests=digests,
            files=attached,
            topics=topics,
            citations=citations,
            cached=cached,
            busy=tuple(sorted(set(self.busy))),
            rows={name: n for name, n in sorted(self.rows.items()) if n},
            documents=tuple(self.documents),
        )

    def attached_it(self, entry: object) -> bool:
        """A file's description (a run's attachment, a thread's file, a waiting file) names
        the person as who attached it."""
        if not isinstance(entry, Mapping):
            return False
        user = self.person.user_id
        url = entry.get("url")
        return (
            entry.get("attacher_id") == user
            or entry.get("attached_by") == user
            or (isinstance(url, str) and _link_names(url, user))
        )

    def _their_files(self) -> None:
        """Their files' links and the names they were attached under, wherever a file is
        described."""
        described: list[Any] = []
        for (attached,) in self.conn.execute(
            select(_runs.c.attachments).where(_runs.c.attachments.is_not(None))
        ):
            described += attached or []
        for (kept,) in self.conn.execute(
            select(_variables.c.files).where(_variables.c.files.is_not(None))
        ):
            described += kept or []
        described += [a for (a,) in self.conn.execute(select(_files.c.attachment))]
        for entry in described:
            if not self.attached_it(entry):
                continue
            if isinstance(entry.get("url"), str) and entry["url"]:
                self.links.add(entry["url"])
            if isinstance(entry.get("attached_by"), str) and entry["attached_by"].strip():
                self.names.add(entry["attached_by"].strip())

    def _runs(self) -> tuple[int, int]:
        """Their finished runs deleted, then the threads those leave without a run."""
        conn, key = self.conn, self.person.key
        rows = conn.execute(
            select(
                _runs.c.id,
                _runs.c.thread_id,
                _runs.c.status,
                _runs.c.delivery,
                _runs.c.topic,
                _runs.c.created_at,
                _runs.c.started_at,
                _runs.c.finished_at,
            ).where(_runs.c.requested_by == key)
        ).all()
        done = [
            r for r in rows if r.status in FINISHED_STATUSES and r.delivery != DeliveryState.PENDING
        ]
        self.busy += [str(r.id) for r in rows if r not in done]
        # A thread where someone else's run is going on: its variables are in that runner's
        # hands, so what their runs added there cannot be taken out yet; those runs stay too
        # (they say what to take out) until the next forget.
        going = conn.execute(
            select(_runs.c.id, _runs.c.thread_id).where(
                _runs.c.thread_id.in_({r.thread_id for r in done}),
                _runs.c.status.in_(UNFINISHED_STATUSES),
            )
        ).all()
        self.busy += [str(i) for i, _ in going]
        held = {t for _, t in going}
        done = [r for r in done if r.thread_id not in held]
        if not done:
            return 0, 0
        ids = [r.id for r in done]
        now = datetime.now(UTC)
        for r in done:
            self.theirs.ids.add(str(r.id))
            self.theirs.topics.setdefault(r.thread_id, set()).add(r.topic)
            began = _aware(r.started_at or r.created_at)
            window = (began, _aware(r.finished_at or now))
            self.theirs.windows.setdefault(r.thread_id, []).append(window)
        self.theirs.urls |= {
            u
            for (u,) in conn.execute(select(_sources.c.url).where(_sources.c.run_id.in_(ids)))
            if u
        }
        self.documents += documents_of(conn, _runs.c.id.in_(ids)).values()
        for table, column in ((_sources, _sources.c.run_id), (_feedback, _feedback.c.run_id)):
            counted = conn.execute(select(func.count()).where(column.in_(ids))).scalar_one()
            self.count(table, counted)
        runs = self.count(_runs, conn.execute(delete(_runs).where(_runs.c.id.in_(ids))).rowcount)
        touched = {r.thread_id for r in done}
        has_run = select(_runs.c.id).where(_runs.c.thread_id == _threads.c.id).exists()
        gone = [
            i
            for (i,) in conn.execute(
                select(_threads.c.id).where(_threads.c.id.in_(touched), ~has_run)
            )
        ]
        if gone:
            self.count(
                _variables,
                conn.execute(
                    select(func.count()).where(_variables.c.thread_id.in_(gone))
                ).scalar_one(),
            )
        threads = self.count(
            _threads, conn.execute(delete(_threads).where(_threads.c.id.in_(gone))).rowcount
        )
        return runs, threads

    def _variables(self) -> tuple[int, int, int]:
        """Their guidance, files and topics taken out of threads' variables, and the notes of
        the runs that quote that guidance."""
        conn, person = self.conn, self.person
        rows: list[dict[str, Any]] = [dict(r) for r in conn.execute(select(_variables)).mappings()]
        guidance = files = topics = 0
        for row in rows:
            thread_id, given, attached = row["thread_id"], row["guidance"], row["files"]
            mine = [g for g in given or [] if g.get("by") == person.key]
            mine += [g for g in given or [] if g.get("run_id") in self.theirs.ids and g not in mine]
            theirs = [
                f
                for f in attached or []
                if self.attached_it(f) or f.get("run_id") in self.theirs.ids
            ]
            searched = self._searched(row)
            if not mine and not theirs and not searched:
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
            values = _without_searched(row, searched, self.theirs)
            values["guidance"] = [g for g in given or [] if g not in mine] or None
            values["files"] = [f for f in attached or [] if f not in theirs] or None
            self.count(
                _variables,
                conn.execute(
                    update(_variables)
                    .where(_variables.c.thread_id == thread_id)
                    .values(**values, version=_variables.c.version + 1)
                ).rowcount,
            )
            guidance += len([g for g in mine if g.get("by") == person.key])
            files += len(theirs)
            topics += len(searched)
            for entry in mine:
                if entry.get("by") == person.key:
                    self._unquote(
                        str(entry.get("run_id", "")), _guidance_quote(entry, person.user_id)
                    )
        return guidance, files, topics

    def _searched(self, row: Mapping[str, Any]) -> set[str]:
        """The topics of this thread that the person's runs searched (and gathers their
        findings' result links for the page cache)."""
        theirs = self.theirs
        asked = theirs.topics.get(row["thread_id"])
        if asked is None:  # no run of theirs in this thread
            return set()
        windows = theirs.windows.get(row["thread_id"], [])
        searched = {t for t in row["topics"] or [] if t in asked}
        for node in _graph_nodes(row):
            if node.get("run_id") in theirs.ids and isinstance(node.get("question"), str):
                searched.add(node["question"])
        for finding in row["findings"] or []:
            topic = finding.get("topic")
            if not isinstance(topic, str):
                continue
            when = _when(finding.get("searched_at"))
            if (
                topic in asked
                or topic in searched
                or (when is not None and any(a <= when <= b for a, b in windows))
            ):
                searched.add(topic)
                theirs.urls |= set(_links_of(finding))
        asked |= searched
        return searched

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
        self.count(
            _runs,
            self.conn.execute(
                update(_runs)
                .where(_runs.c.id == run_id)
                .values(notes=notes, report_markdown=report)
            ).rowcount,
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
            or self.attached_it(attachment)
        ]
        if not doomed:
            return 0
        return self.count(
            _files, self.conn.execute(delete(_files).where(_files.c.id.in_(doomed))).rowcount
        )

    def _citations(self) -> int:
        """Other people's runs that read a file they attached: the file, its citation and
        the report name neither them nor the file's link."""
        conn = self.conn
        rewrite = _Rewrite(self.names, self.links)
        cited = conn.execute(
            select(_sources.c.id, _sources.c.run_id, _sources.c.title, _sources.c.url).where(
                _sources.c.kind == "attachment"
            )
        ).all()
        changed: dict[str, list[tuple[str, str, str]]] = {}
        citations = 0
        for source_id, run_id, title, url in cited:
            if not (url in self.links or rewrite.names_them(title)):
                continue
            new_title = rewrite.text(title)
            self.count(
                _sources,
                conn.execute(
                    update(_sources)
                    .where(_sources.c.id == source_id)
                    .values(title=new_title, url="")
                ).rowcount,
            )
            citations += 1
            changed.setdefault(str(run_id), []).append((title, url or "", new_title))
        carried = conn.execute(
            select(_runs.c.id, _runs.c.attachments).where(_runs.c.attachments.is_not(None))
        ).all()
        for run_id, attachments in carried:
            if any(self.attached_it(a) for a in attachments or []):
                kept = [
                    {**a, "attached_by": "", "attacher_id": "", "url": None}
                    if self.attached_it(a)
                    else a
                    for a in attachments
                ]
                conn.execute(update(_runs).where(_runs.c.id == run_id).values(attachments=kept))
                changed.setdefault(str(run_id), [])
        for run_id, titles in changed.items():
            row = conn.execute(
                select(_runs.c.notes, _runs.c.report_markdown).where(_runs.c.id == run_id)
            ).one()
            report = row.report_markdown
            if report is not None:
                for title, url, new_title in titles:
                    if url:
                        report = report.replace(f"[{title}]({url})", new_title)
                report = rewrite.text(report)
            self.count(
                _runs,
                conn.execute(
                    update(_runs)
                    .where(_runs.c.id == run_id)
                    .values(
                        notes=[rewrite.text(n) for n in row.notes or []], report_markdown=report
                    )
                ).rowcount,
            )
        return citations

    def _caches(self) -> int:
        """The search results cached for their topics, and the page texts cached for the
        links those searches and their runs found."""
        asked = {t for topics in self.theirs.topics.values() for t in topics}
        if not asked and not self.theirs.urls:
            return 0
        queries = {_query_identity(t) for t in asked} - {""}
        doomed = [
            (provider, query)
            for provider, query in self.conn.execute(
                select(_search_cache.c.provider, _search_cache.c.query)
            )
            if _query_identity(query) in queries
        ]
        searches = 0
        for provider, query in doomed:
            searches += self.count(
                _search_cache,
                self.conn.execute(
                    delete(_search_cache).where(
                        _search_cache.c.provider == provider, _search_cache.c.query == query
                    )
                ).rowcount,
            )
        keys = [_page_key(u) for u in self.theirs.urls]
        pages = 0
        for start in range(0, len(keys), 500):
            pages += self.count(
                _page_cache,
                self.conn.execute(
                    delete(_page_cache).where(_page_cache.c.key.in_(keys[start : start + 500]))
                ).rowcount,
            )
        return searches + pages


class _Rewrite:
    """Text that names the person as who attached a file: ``attached by <them>`` becomes
    ``attached by (forgotten)``, and their files' links are removed."""

    def __init__(self, names: Iterable[str], links: Iterable[str]) -> None:
        ordered = sorted({n for n in names if n}, key=len, reverse=True)
        self._named = (
            re.compile("attached by (?:" + "|".join(re.escape(n) for n in ordered) + ")")
            if ordered
            else None
        )
        self._links = sorted({u for u in links if u}, key=len, reverse=True)

    def names_them(self, text: str) -> bool:
        return bool(self._named and self._named.search(text)) or any(u in text for u in self._links)

    def text(self, text: str) -> str:
        if self._named is not None:
            text = self._named.sub(f"attached by {FORGOTTEN}", text)
        for link in self._links:
            text = text.replace(link, "")
        return text


def _link_names(url: str, user_id: str) -> bool:
    """A link whose path names the person's id as one of its parts (Slack's file permalink:
    ``/files/<user id>/<file id>/<name>``)."""
    return f"/{user_id}/" in url


def _graph_nodes(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    state = row["strategy_state"] or {}
    graph = state.get("graph") if isinstance(state, dict) else None
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    legacy = row["graph"]
    return [n for n in [*(nodes or []), *(legacy or [])] if isinstance(n, dict)]


def _without_searched(row: Mapping[str, Any], searched: set[str], theirs: _Runs) -> dict[str, Any]:
    """The variables' research columns without the person's topics, findings and sub-questions."""
    if not searched:
        return {}
    values: dict[str, Any] = {
        "topics": [t for t in row["topics"] or [] if t not in searched],
        "findings": [f for f in row["findings"] or [] if f.get("topic") not in searched],
    }
    # The topic planned for the thread's next round: theirs when their run planned it last,
    # and nothing says which run did; a later run plans afresh.
    values["next_search_topic"] = None

    def kept(nodes: list[Any]) -> list[Any]:
        names = {
            n.get("name")
            for n in nodes
            if isinstance(n, dict)
            and (n.get("run_id") in theirs.ids or n.get("question") in searched)
        }
        return [
            {**n, "after": [a for a in n.get("after") or [] if a not in names]}
            for n in nodes
            if isinstance(n, dict) and n.get("name") not in names
        ]

    state = row["strategy_state"]
    if isinstance(state, dict) and isinstance(state.get("graph"), dict):
        graph = state["graph"]
        values["strategy_state"] = {
            **state,
            "graph": {**graph, "nodes": kept(list(graph.get("nodes") or []))},
        }
    if isinstance(row["graph"], list):
        values["graph"] = kept(row["graph"]) or None
    return values


def _links_of(finding: Mapping[str, Any]) -> list[str]:
    found = [r.get("url") for r in finding.get("results") or [] if isinstance(r, dict)]
    found += [p.get("url") for p in finding.get("pages") or [] if isinstance(p, dict)]
    return [u for u in found if isinstance(u, str) and u]


def _when(value: object) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return _aware(datetime.fromisoformat(value))
    except ValueError:
        return None


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _query_identity(query: str) -> str:
    """A query's words, without case, punctuation or spacing (a superset of the search
    cache's own normalisation, ``core.search.cache.normalise_query``)."""
    text = unicodedata.normalize("NFKC", query).casefold()
    return " ".join(re.sub(r"[\W_]+", " ", text).split())


def _guidance_quote(entry: dict[str, Any], user_id: str) -> str:
    """What every note quoting this guidance holds: its text and then the person's name as
    their platform gave it, else their id (``core.models.Guidance.line``: ``<text> (<name or
    id>, 14:02 UTC)``)."""
    return f"{entry.get('text', '')} ({entry.get('name') or user_id}, "
