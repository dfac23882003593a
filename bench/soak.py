"""Long life: one ``fathom serve`` through 1,000 research runs and 200 slow clients.

    python -m bench.soak            # 1,000 runs, 200 slow clients (a few minutes)
    python -m bench.soak --quick    # 200 runs (warm-up point after 50), 40 slow clients

Three processes besides this one (the load generator): ``python -m tests.fakes`` (LLM and
SearXNG, zero latency), a fake Slack Web API (``bench.slack_ack --child-slack``) and the server
under test, ``fathom serve`` on loopback with SQLite in a temp dir and the in-process runner
(``FATHOM_QUEUE=local``).

1. Quiet point "before": the server is ready and idle; ``GET /metrics`` gives its asyncio
   tasks and database connections, ``/proc/<pid>`` its open file descriptors and RSS.
2. ``--runs`` signed ``/research … depth=2`` slash commands, ``--in-flight`` at a time: a
   request is in flight from its POST until the database shows its delivery ended
   (``research_runs.delivery``), that is until its report was posted to the fake Slack. The
   load pauses after ``--warmup-runs`` runs, waits for them to drain, and takes the RSS
   baseline ("warm"); it samples the same figures (not quiet) every 100 runs.
3. ``--slow-clients`` raw-socket clients, ``--slow-at-once`` at a time, to ``/slack/events``:
   half send their headers with a ``Content-Length`` larger than what they send, then close;
   half trickle the body one byte every ``--trickle-every`` s until the server answers 408
   (``FATHOM_BODY_TIMEOUT``, 2 s here) and closes.
4. Quiet point "after": once drained, the same figures again (scraped until two scrapes in a
   row agree, at most 15 s). Then every run is checked in the database (succeeded, delivery
   posted) and in the fake Slack (its report messages, counted per run).

Goals: RSS growth from the warm point to the end under 10%; tasks, fds and connections after
equal to before; every run succeeded with one report each. Results go to
``bench/results/soak.json``; the Markdown table is printed for bench/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from bench.slack_ack import (
    FORM,
    SECRET,
    Options,
    child,
    clean_env,
    cpu_seconds,
    distribution_ms,
    fathom_serve,
    log_summary,
    machine,
    server_env,
    stop_process,
    sync_url,
)

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "soak.json"
ACCEPTED = ":mag: On it:"  # bots/slack/markup.py accepted_reply
#: Workspaces (one user and one channel each) the runs cycle through. Slack allows a workspace
#: about 50 edits a minute and the server keeps to that (bots/chat/throttle.py), so one
#: workspace would make the limiter, not the server, what is measured. All of them are seen
#: in the warm-up, so anything kept per workspace or per user is full by the baseline.
WORKSPACES = 100
BODY_TIMEOUT = 2.0  # FATHOM_BODY_TIMEOUT for the benchmark (default 10 s)
RUN_TIMEOUT = 120.0  # a run not delivered after this long counts as failed
GOALS = {"rss_growth_pct": 10.0}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- what the server looks like ----------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS / VmHWM (kB) and Threads from /proc/<pid>/status."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM", "Threads"):
            out[key] = int(rest.split()[0])
    return out


def fd_targets(pid: int) -> list[str]:
    """What each open file descriptor of ``pid`` points to (``socket:[inode]``, a path, ...)."""
    targets = []
    for entry in Path(f"/proc/{pid}/fd").iterdir():
        try:
            targets.append(os.readlink(entry))
        except OSError:  # closed meanwhile
            continue
    return targets


def fd_kinds(targets: list[str]) -> dict[str, int]:
    """Open file descriptors by kind: socket, pipe, anon_inode (epoll, eventfd), file."""
    kinds: Counter[str] = Counter()
    for target in targets:
        kind = target.split(":", 1)[0] if ":" in target and not target.startswith("/") else ""
        kinds[kind or ("file" if target.startswith("/") else target)] += 1
    return dict(kinds)


TCP_STATES = {"01": "established", "06": "time_wait", "08": "close_wait", "0A": "listen"}


def socket_peers(pid: int, targets: list[str], ports: dict[int, str]) -> dict[str, int]:
    """The TCP sockets among ``pid``'s fds, by whom they talk to and their state, e.g.
    ``fake-llm/established``: ``ports`` names the remote (or, for ``server``, local) ports;
    ``other`` is sockets that are not TCP (the event loop's socketpairs, ...)."""
    inodes = {t[8:-1] for t in targets if t.startswith("socket:[")}
    found: Counter[str] = Counter()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[9] not in inodes:
                continue
            inodes.discard(cols[9])
            local, remote = int(cols[1].rsplit(":", 1)[1], 16), int(cols[2].rsplit(":", 1)[1], 16)
            state = TCP_STATES.get(cols[3], cols[3])
            if ports.get(local) == "server":
                who = "server" if state == "listen" else "inbound"
            else:
                who = ports.get(remote, f"port-{remote}")
            found[f"{who}/{state}"] += 1
    if inodes:  # unix sockets (socketpairs of the event loop, ...)
        found["other"] += len(inodes)
    return dict(sorted(found.items()))


def outbound_keepalive(peers: dict[str, int]) -> int:
    """Sockets of the HTTP clients' keep-alive pools: connections to the fakes."""
    return sum(n for k, n in peers.items() if k.startswith(("fake-", "port-")))


def metric_values(text: str) -> dict[str, float]:
    """The samples of one scrape we look at, as ``name{label=value,...}`` -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = (
        "fathom_asyncio_tasks",
        "fathom_db_connections",
        "process_open_fds",
        "process_resident_memory_bytes",
    )
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith(wanted):
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


PORTS: dict[int, str] = {}  # port -> who: the fakes' ports and the server's own


def snapshot(url: str, pid: int) -> dict[str, Any]:
    """One look at the server: /proc first, then a scrape of ``/metrics`` on a new connection
    (so that the scrape's own connection is never among the fds counted)."""
    status = proc_status(pid)
    targets = fd_targets(pid)
    peers = socket_peers(pid, targets, PORTS)
    with httpx.Client(trust_env=False, timeout=10) as client:
        scraped = metric_values(client.get(f"{url}/metrics").text)
    connections = {
        k.split("{", 1)[1].rstrip("}"): int(v)
        for k, v in scraped.items()
        if k.startswith("fathom_db_connections")
    }
    return {
        "at": round(time.monotonic(), 2),
        "rss_mb": round(status["VmRSS"] / 1024, 1),
        "threads": status["Threads"],
        "fds": len(targets),
        "fds_by_kind": fd_kinds(targets),
        "tcp": peers,
        "fds_without_keepalive": len(targets) - outbound_keepalive(peers),
        "asyncio_tasks": int(scraped.get("fathom_asyncio_tasks", -1)),
        "db_connections": connections,
        # The process's own view, during the scrape (its connection and task included).
        "scraped_open_fds": int(scraped.get("process_open_fds", -1)),
        "scraped_rss_mb": round(scraped.get("process_resident_memory_bytes", 0) / 2**20, 1),
    }


def settled(url: str, pid: int, limit: float = 15.0) -> dict[str, Any]:
    """A quiet point: scrape every 0.5 s until two scrapes in a row agree on tasks, fds and
    connections (at most ``limit`` s); returns the last, with the ones before it."""

    def key(s: dict[str, Any]) -> tuple[Any, ...]:
        return s["asyncio_tasks"], s["fds"], tuple(sorted(s["db_connections"].items()))

    started = time.monotonic()
    seen = [snapshot(url, pid)]
    while time.monotonic() - started < limit:
        time.sleep(0.5)
        seen.append(snapshot(url, pid))
        if key(seen[-1]) == key(seen[-2]):
            break
    last = dict(seen[-1])
    last["settle_seconds"] = round(time.monotonic() - started, 1)
    last["scrapes"] = [
        {"tasks": s["asyncio_tasks"], "fds": s["fds"], "conns": s["db_connections"]} for s in seen
    ]
    return last


# --- the runs ----------------------------------------------------------------------------


def team_of(i: int) -> str:
    return f"T{i % WORKSPACES:04d}"


def trigger_of(i: int, tag: str) -> str:
    return f"soak-{tag}-{i}"


def key_of(i: int, tag: str) -> str:
    return f"slack:cmd:{team_of(i)}:{trigger_of(i, tag)}"


def signed_command(i: int, tag: str, depth: int) -> tuple[bytes, dict[str, str]]:
    """Request ``i``'s slash command, signed as Slack signs it (``bench.slack_ack``'s
    ``slash_command`` with this run's workspace, user and channel)."""
    from tests.fakes.slack import sign, slash_command_body

    w = i % WORKSPACES
    body = slash_command_body(
        f"soak topic {i}: heat pumps in cold climates depth={depth}",
        trigger_id=trigger_of(i, tag),
        user_id=f"U{w:04d}",
        team_id=team_of(i),
        channel_id=f"C{w:04d}",
    )
    return body, {**sign(body, SECRET), **FORM}


@dataclass
class RunSample:
    i: int
    status: int  # HTTP status of the slash command; 0 = transport error
    accepted: bool
    ack_s: float
    done_s: float | None = None  # POST sent -> delivery ended (None: never, in RUN_TIMEOUT)
    delivery: str | None = None
    text: str = ""


class Completions:
    """Resolves each in-flight run's future once the database shows its delivery ended.

    One poller for all in-flight runs (one query every 20 ms over at most ``--in-flight``
    keys) on a read-only connection of this process (SQLite WAL: readers never block the
    server's writer)."""

    def __init__(self, db_url: str) -> None:
        from sqlalchemy import create_engine

        self._engine = create_engine(sync_url(db_url))
        self._waiting: dict[str, asyncio.Future[str]] = {}
        self.polls = 0

    def wait(self, key: str) -> asyncio.Future[str]:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[key] = future
        return future

    def forget(self, key: str) -> None:
        self._waiting.pop(key, None)

    def _ended(self, keys: list[str]) -> dict[str, str]:
        from sqlalchemy import bindparam, text

        query = text(
            "SELECT dedupe_key, status, delivery FROM research_runs "
            "WHERE dedupe_key IN :keys AND delivery IN ('posted', 'failed')"
        ).bindparams(bindparam("keys", expanding=True))
        with self._engine.connect() as conn:
            return {str(k): f"{s}/{d}" for k, s, d in conn.execute(query, {"keys": keys})}

    async def poll(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if self._waiting:
                ended = await asyncio.to_thread(self._ended, list(self._waiting))
                self.polls += 1
                for key, state in ended.items():
                    future = self._waiting.pop(key, None)
                    if future is not None and not future.done():
                        future.set_result(state)
            await asyncio.sleep(0.02)

    def close(self) -> None:
        self._engine.dispose()


async def run_requests(
    url: str,
    completions: Completions,
    numbers: range,
    in_flight: int,
    tag: str,
    depth: int,
    every: int,
    on_every: Callable[[int], None],
) -> list[RunSample]:
    """Requests ``numbers``, ``in_flight`` at a time (closed loop): each client posts its next
    request when its last one's report is posted. ``on_every(done)`` after every ``every``."""
    samples: list[RunSample] = []
    queue = iter(numbers)
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(trust_env=False, timeout=30, limits=limits) as client:

        async def one(i: int) -> RunSample:
            body, headers = signed_command(i, tag, depth)
            start = time.perf_counter()
            future = completions.wait(key_of(i, tag))
            try:
                response = await client.post(f"{url}/slack/events", content=body, headers=headers)
            except httpx.HTTPError as exc:
                completions.forget(key_of(i, tag))
                return RunSample(i, 0, False, time.perf_counter() - start, text=repr(exc))
            ack = time.perf_counter() - start
            answer = str(response.json().get("text") or "") if response.status_code == 200 else ""
            sample = RunSample(i, response.status_code, answer.startswith(ACCEPTED), ack)
            sample.text = answer[:120]
            if not sample.accepted:
                completions.forget(key_of(i, tag))
                return sample
            try:
                sample.delivery = await asyncio.wait_for(future, RUN_TIMEOUT)
                sample.done_s = time.perf_counter() - start
            except TimeoutError:
                completions.forget(key_of(i, tag))
            return sample

        async def client_loop() -> None:
            for i in queue:  # shared iterator: the next request number, whoever is free
                samples.append(await one(i))
                if (numbers.start + len(samples)) % every == 0:
                    on_every(numbers.start + len(samples))

        await asyncio.gather(*(client_loop() for _ in range(in_flight)))
    return samples


# --- slow and disconnecting clients ------------------------------------------------------


def raw_request(host: str, body: bytes, headers: dict[str, str], length: int) -> bytes:
    head = [
        "POST /slack/events HTTP/1.1",
        f"Host: {host}",
        f"Content-Length: {length}",
        *(f"{k}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode()


async def disconnecting_client(
    host: str, port: int, body: bytes, headers: dict[str, str]
) -> dict[str, Any]:
    """Headers promising the whole body, half of it, then close (no answer expected)."""
    start = time.perf_counter()
    _reader, writer = await asyncio.open_connection(host, port)
    writer.write(raw_request(f"{host}:{port}", body, headers, len(body)))
    writer.write(body[: len(body) // 2])
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    return {"kind": "disconnect", "seconds": round(time.perf_counter() - start, 3)}


async def trickling_client(
    host: str, port: int, body: bytes, headers: dict[str, str], every: float, limit: float
) -> dict[str, Any]:
    """Headers, then the body one byte every ``every`` s (never the last byte) until the server
    answers; then read until the server ends the connection (EOF, or a reset: a byte sent
    after the server closed is answered with RST). Bounded by ``limit`` seconds."""
    start = time.perf_counter()
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(raw_request(f"{host}:{port}", body, headers, len(body)))
    await writer.drain()
    answer = asyncio.ensure_future(reader.read(4096))
    sent, ending, data, closed = 0, "", b"", False
    try:
        while sent < len(body) - 1 and not answer.done():
            if time.perf_counter() - start > limit:
                break
            try:
                writer.write(body[sent : sent + 1])
                await writer.drain()
            except ConnectionError as exc:  # the server closed: its answer may be waiting
                ending = f"write: {type(exc).__name__}"
                break
            sent += 1
            await asyncio.wait({answer}, timeout=every)
        try:
            data = await asyncio.wait_for(answer, max(0.1, limit - (time.perf_counter() - start)))
        except ConnectionError as exc:  # reset before the answer could be read
            ending, closed = f"read: {type(exc).__name__}", True
        except TimeoutError:
            ending = "no answer"
        answered = time.perf_counter() - start
        if data:  # the rest of the answer, then the end of the connection
            try:
                while await asyncio.wait_for(reader.read(4096), 5):
                    pass
                ending, closed = ending or "eof", True
            except ConnectionError as exc:
                ending, closed = ending or f"reset: {type(exc).__name__}", True
            except TimeoutError:
                ending = "still open 5 s after the answer"
    finally:
        answer.cancel()
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    first = data.split(b"\r\n", 1)[0].decode(errors="replace")
    status = int(first.split()[1]) if first.startswith("HTTP/") and len(first.split()) > 1 else 0
    return {
        "kind": "trickle",
        "status": status,
        "bytes_sent": sent,
        "answered_after_s": round(answered, 3),
        "server_closed": closed,
        "ending": ending,
    }


async def slow_clients(
    url: str, n: int, at_once: int, every: float, tag: str, depth: int
) -> list[dict[str, Any]]:
    parts = urlsplit(url)
    host, port = str(parts.hostname), int(parts.port or 80)
    gate = asyncio.Semaphore(at_once)
    limit = BODY_TIMEOUT + 8.0

    async def one(k: int) -> dict[str, Any]:
        body, headers = signed_command(100_000 + k, tag, depth)  # never completed
        async with gate:
            try:
                if k % 2 == 0:
                    return await disconnecting_client(host, port, body, headers)
                return await trickling_client(host, port, body, headers, every, limit)
            except OSError as exc:
                return {"kind": "disconnect" if k % 2 == 0 else "trickle", "error": repr(exc)}

    return list(await asyncio.gather(*(one(k) for k in range(n))))


# --- checks ------------------------------------------------------------------------------


def runs_in_database(db_url: str, tag: str) -> list[dict[str, Any]]:
    from sqlalchemy import create_engine, text

    engine = create_engine(sync_url(db_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT dedupe_key, status, delivery, report_parts_posted, "
                    "progress_message_id FROM research_runs WHERE dedupe_key LIKE :pattern"
                ),
                {"pattern": f"slack:cmd:%:soak-{tag}-%"},
            )
            return [
                {"key": k, "status": s, "delivery": d, "parts": int(p or 0), "ts": ts}
                for k, s, d, p, ts in rows
            ]
    finally:
        engine.dispose()


def report_posts(slack_url: str) -> tuple[Counter[str], int]:
    """Report messages (``chat.postMessage`` with blocks, in a thread) and report files, per
    thread ``ts``; and how many calls the fake recorded in all."""
    with httpx.Client(trust_env=False, timeout=60) as client:
        calls = client.get(f"{slack_url}/_fake/calls").json()
    posts: Counter[str] = Counter()
    for call in calls:
        params = call["params"]
        if (
            call["method"] == "chat.postMessage"
            and params.get("blocks")
            and params.get("thread_ts")
        ):
            posts[str(params["thread_ts"])] += 1
        elif call["method"] == "files.completeUploadExternal" and params.get("thread_ts"):
            posts[str(params["thread_ts"])] += 1
    return posts, len(calls)


def check_runs(
    samples: list[RunSample], db_rows: list[dict[str, Any]], posts: Counter[str], expected: int
) -> dict[str, Any]:
    per_run = Counter(posts.get(str(row["ts"]), 0) for row in db_rows)
    mismatched = [row["key"] for row in db_rows if posts.get(str(row["ts"]), 0) != row["parts"]]
    statuses = Counter(f"{row['status']}/{row['delivery']}" for row in db_rows)
    good = sum(
        1
        for row in db_rows
        if row["status"] == "succeeded"
        and row["delivery"] == "posted"
        and row["parts"] >= 1
        and posts.get(str(row["ts"]), 0) == row["parts"]
    )
    return {
        "requests": len(samples),
        "accepted": sum(1 for s in samples if s.accepted),
        "not_accepted_examples": sorted(
            {f"{s.status} {s.text}" for s in samples if not s.accepted}
        )[:5],
        "delivered_in_time": sum(1 for s in samples if s.done_s is not None),
        "run_rows": len(db_rows),
        "status_delivery": dict(statuses),
        "report_parts_posted": dict(Counter(row["parts"] for row in db_rows)),
        "report_posts_per_run_in_fake_slack": dict(sorted(per_run.items())),
        "runs_whose_posts_differ_from_parts": len(mismatched),
        "mismatched_examples": mismatched[:5],
        "succeeded_with_one_report": good,
        "met": good == expected == len(db_rows),
    }


# --- report ------------------------------------------------------------------------------


def conn_total(s: dict[str, Any], state: str) -> int:
    return sum(v for k, v in s["db_connections"].items() if f"state={state}" in k)


def judge(result: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    before, warm, after = result["before"], result["warm"], result["after"]
    growth = (after["rss_mb"] - warm["rss_mb"]) / warm["rss_mb"] * 100
    result["rss_growth_pct"] = round(growth, 2)
    runs = result["runs_check"]
    slow = result["slow_clients"]
    w = result["settings"]["warmup_runs"]
    n = result["settings"]["runs"]

    def keepalive(s: dict[str, Any]) -> int:
        return int(s["fds"]) - int(s["fds_without_keepalive"])

    def conns(s: dict[str, Any]) -> str:
        return f"{conn_total(s, 'open')} open / {conn_total(s, 'checked_out')} checked out"

    trickle_ok = slow["trickle"]["answered_408_and_closed"] == slow["trickle"]["count"]
    return [
        (
            f"RSS growth after warm-up ({w} runs -> end)",
            "< 10%",
            f"{growth:+.1f}% ({warm['rss_mb']} -> {after['rss_mb']} MB; "
            f"{before['rss_mb']} MB before the load)",
            growth < GOALS["rss_growth_pct"],
        ),
        (
            "asyncio tasks, before -> after",
            "back to before",
            f"{before['asyncio_tasks']} -> {after['asyncio_tasks']} "
            f"(after {w} runs: {warm['asyncio_tasks']})",
            after["asyncio_tasks"] <= before["asyncio_tasks"],
        ),
        (
            "open fds (/proc/PID/fd), before -> after",
            "back to before",
            f"{before['fds']} -> {after['fds']} (after {w} runs: {warm['fds']}; "
            f"keep-alive connections to the fakes: {keepalive(before)} -> {keepalive(after)})",
            after["fds"] <= before["fds"],
        ),
        (
            "open fds without the HTTP clients' keep-alive connections",
            "back to before",
            f"{before['fds_without_keepalive']} -> {after['fds_without_keepalive']} "
            f"(after {w} runs: {warm['fds_without_keepalive']})",
            after["fds_without_keepalive"] <= before["fds_without_keepalive"],
        ),
        (
            "database connections, before -> after",
            "back to before",
            f"{conns(before)} -> {conns(after)}",
            conn_total(after, "open") <= conn_total(before, "open")
            and conn_total(after, "checked_out") == 0,
        ),
        (
            f"runs succeeded with one report each (of {n})",
            f"{n}",
            f"{runs['succeeded_with_one_report']} (report posts per run: "
            f"{runs['report_posts_per_run_in_fake_slack']})",
            bool(runs["met"]),
        ),
        (
            "trickling clients answered 408 and cut off",
            f"{slow['trickle']['count']}",
            f"{slow['trickle']['answered_408_and_closed']} (after "
            f"{slow['trickle']['answered_after_s'].get('p50', 0) / 1000:.2f} s median; "
            f"then {', '.join(f'{k}: {v}' for k, v in slow['trickle']['endings'].items())})",
            trickle_ok,
        ),
    ]


def markdown_table(rows: list[tuple[str, str, str, bool]]) -> str:
    lines = ["| benchmark | goal | result | met? |", "|---|---|---|---|"]
    for name, goal, value, met in rows:
        lines.append(f"| {name} | {goal} | {value} | {'yes' if met else '**no**'} |")
    return "\n".join(lines)


def summarize_slow(clients: list[dict[str, Any]]) -> dict[str, Any]:
    trickle = [c for c in clients if c["kind"] == "trickle"]
    disconnect = [c for c in clients if c["kind"] == "disconnect"]
    return {
        "disconnect": {
            "count": len(disconnect),
            "errors": dict(Counter(c["error"] for c in disconnect if c.get("error"))),
        },
        "trickle": {
            "count": len(trickle),
            "statuses": dict(Counter(str(c.get("status", 0)) for c in trickle)),
            "answered_408_and_closed": sum(
                1 for c in trickle if c.get("status") == 408 and c.get("server_closed")
            ),
            "answered_after_s": distribution_ms(
                [c["answered_after_s"] for c in trickle if "answered_after_s" in c]
            ),
            "bytes_sent": distribution_ms(
                [c["bytes_sent"] / 1000 for c in trickle if "bytes_sent" in c]
            ),
            "endings": dict(Counter(c.get("ending") or c.get("error", "?") for c in trickle)),
        },
    }


def brief(s: dict[str, Any]) -> str:
    return (
        f"RSS {s['rss_mb']} MB, {s['fds']} fds ({s['fds_without_keepalive']} without "
        f"keep-alive connections; tcp {s['tcp']}), {s['threads']} threads, "
        f"{s['asyncio_tasks']} tasks, conns {s['db_connections']}"
    )


# --- main --------------------------------------------------------------------------------


@dataclass
class Soak:
    runs: int
    warmup_runs: int
    in_flight: int
    depth: int
    slow_clients: int
    slow_at_once: int
    trickle_every: float
    idle: float
    series: list[dict[str, Any]] = field(default_factory=list)


def soak(cfg: Soak, fakes: dict[str, Any], slack: dict[str, Any], workdir: Path) -> dict[str, Any]:
    db_url = f"sqlite+aiosqlite:///{workdir / 'soak.db'}"
    opts = Options(
        seconds=0,
        warmup=0,
        clients=0,
        background_runs=0,
        depth=cfg.depth,
        max_concurrent_runs=100,
        timeout=30,
    )
    env = server_env(db_url, fakes, slack, opts)
    env.update(FATHOM_QUEUE="local", FATHOM_BODY_TIMEOUT=f"{BODY_TIMEOUT:g}")
    tag = os.urandom(3).hex()
    result: dict[str, Any] = {}
    with fathom_serve(env, workdir) as served:
        pid, url = served.proc.pid, served.url
        PORTS.clear()
        for name, endpoint in (
            ("fake-llm", fakes["openai_base_url"]),
            ("fake-search", fakes["searxng_url"]),  # also serves the result pages
            ("fake-slack", slack["api_url"]),
            ("server", url),
        ):
            PORTS[int(urlsplit(endpoint).port or 80)] = name
        cpu0 = cpu_seconds(pid)
        result["before"] = settled(url, pid)
        say(f"before: {brief(result['before'])}")
        completions = Completions(db_url)
        started = time.monotonic()

        def sample(done: int) -> None:
            s = snapshot(url, pid)
            s["runs_done"] = done
            s["seconds"] = round(time.monotonic() - started, 1)
            cfg.series.append(s)
            say(f"  {done} runs, {s['seconds']} s: {brief(s)}")

        async def load(numbers: range) -> list[RunSample]:
            stop = asyncio.Event()
            poller = asyncio.create_task(completions.poll(stop))
            try:
                return await run_requests(
                    url, completions, numbers, cfg.in_flight, tag, cfg.depth, 100, sample
                )
            finally:
                stop.set()
                await poller

        try:
            say(f"{cfg.warmup_runs} warm-up runs, {cfg.in_flight} in flight …")
            t0 = time.monotonic()
            samples = asyncio.run(load(range(cfg.warmup_runs)))
            warm_seconds = time.monotonic() - t0
            result["warm"] = settled(url, pid)
            say(
                f"warm: RSS {result['warm']['rss_mb']} MB; {cfg.runs - cfg.warmup_runs} more runs …"
            )
            t1 = time.monotonic()
            samples += asyncio.run(load(range(cfg.warmup_runs, cfg.runs)))
            rest_seconds = time.monotonic() - t1
        finally:
            completions.close()
        result["after_runs"] = settled(url, pid)
        say(f"{cfg.slow_clients} slow clients, {cfg.slow_at_once} at a time …")
        t2 = time.monotonic()
        clients = asyncio.run(
            slow_clients(url, cfg.slow_clients, cfg.slow_at_once, cfg.trickle_every, tag, cfg.depth)
        )
        slow_seconds = time.monotonic() - t2
        with httpx.Client(trust_env=False, timeout=10) as client:
            alive = client.get(f"{url}/healthz").status_code
        result["after"] = settled(url, pid)
        say(f"after: {brief(result['after'])}")
        if cfg.idle > 0:  # do idle keep-alive connections go by themselves?
            time.sleep(cfg.idle)
            result["after_idle"] = settled(url, pid)
            result["after_idle"]["idle_seconds"] = cfg.idle
            say(f"after {cfg.idle:g} s idle: {brief(result['after_idle'])}")
        result["server_cpu_seconds"] = round(cpu_seconds(pid) - cpu0, 1)
        code = stop_process(served.proc, timeout=60)
        result["server_exit_code"] = code
        result["server_log"] = log_summary(served.log)
        result["server_command"] = " ".join(served.command)
    posts, calls = report_posts(slack["url"])
    rows = runs_in_database(db_url, tag)
    result["runs_check"] = check_runs(samples, rows, posts, cfg.runs)
    result["fake_slack_calls"] = calls
    done = [s.done_s for s in samples if s.done_s is not None]
    result["load"] = {
        "warmup_seconds": round(warm_seconds, 1),
        "rest_seconds": round(rest_seconds, 1),
        "runs_per_s_after_warmup": round((cfg.runs - cfg.warmup_runs) / rest_seconds, 2),
        "ack_latency_ms": distribution_ms([s.ack_s for s in samples]),
        "request_to_report_ms": distribution_ms(done),
        "db_polls": completions.polls,
    }
    result["slow_clients"] = summarize_slow(clients)
    result["slow_clients"]["seconds"] = round(slow_seconds, 1)
    result["slow_clients"]["healthz_after"] = alive
    result["series"] = cfg.series
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="200 runs, 40 slow clients")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--warmup-runs", type=int, help="the RSS baseline's point (100)")
    parser.add_argument("--in-flight", type=int, default=20)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--slow-clients", type=int)
    parser.add_argument("--slow-at-once", type=int, default=10)
    parser.add_argument("--trickle-every", type=float, default=0.05, help="seconds per byte")
    parser.add_argument(
        "--idle", type=float, default=20.0, help="idle seconds before a last look (0: none)"
    )
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    cfg = Soak(
        runs=args.runs or (200 if args.quick else 1000),
        warmup_runs=args.warmup_runs or (50 if args.quick else 100),
        in_flight=args.in_flight,
        depth=args.depth,
        slow_clients=args.slow_clients
        if args.slow_clients is not None
        else (40 if args.quick else 200),
        slow_at_once=args.slow_at_once,
        trickle_every=args.trickle_every,
        idle=args.idle,
    )
    if not 0 < cfg.warmup_runs < cfg.runs:
        parser.error("--warmup-runs must be between 0 and --runs")
    results: dict[str, Any] = {
        "machine": machine(),
        "command": (
            "python -m bench.soak " + shlex.join(argv if argv is not None else sys.argv[1:])
        ).strip(),
        "goals": GOALS,
        "settings": {
            "runs": cfg.runs,
            "warmup_runs": cfg.warmup_runs,
            "in_flight": cfg.in_flight,
            "depth": cfg.depth,
            "workspaces": WORKSPACES,
            "slow_clients": cfg.slow_clients,
            "slow_at_once": cfg.slow_at_once,
            "trickle_every_s": cfg.trickle_every,
            "idle_at_end_s": cfg.idle,
            "FATHOM_BODY_TIMEOUT": BODY_TIMEOUT,
            "FATHOM_QUEUE": "local",
            "database": "sqlite",
            "fakes_latency_s": 0,
        },
    }
    with ExitStack() as stack:
        fakes, fakes_pid = stack.enter_context(child(["tests.fakes"], clean_env()))
        slack, slack_pid = stack.enter_context(
            child(["bench.slack_ack", "--child-slack"], clean_env())
        )
        with tempfile.TemporaryDirectory(prefix="fathom-soak-") as tmp:
            results.update(soak(cfg, fakes, slack, Path(tmp)))
        results["fake_pids"] = {"fakes": fakes_pid, "fake_slack": slack_pid}
    results["machine"]["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    rows = judge(results)
    results["met"] = {name: met for name, _, _, met in rows}
    results["table"] = markdown_table(rows)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    print(results["table"])
    return 0 if all(met for *_, met in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
