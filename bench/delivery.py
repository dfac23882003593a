"""A long report's delivery before and after issue 56: as messages in the thread, or as one
document (a Slack canvas, a Feishu cloud document) and a summary message.

    python -m bench.delivery [--runs 5] [--api-latency 0.15] [--platforms slack,feishu]

Per platform, the real ``fathom serve`` app (its lifespan, job runner and the platform's
adapter, in a thread of this process, on a SQLite file) against the loopback fakes: the LLM
and search fakes, and the platform's fake Web API answering every call after
``--api-latency`` seconds (a Web API round trip; Slack's and Feishu's are of that order from a
cloud region). The fake writer answers a depth-3 research with the same long report each time
(about 32 KB of Markdown: eight themes of nine cited paragraphs, as a depth-3 report is), so both
sides deliver the same text. ``parts`` is the app with ``FATHOM_REPORT_DOCUMENT_PARTS=0``
(the report as messages, as before the issue), ``document`` with the default (2). The two
alternate, ``--runs`` runs each, every run a new mention in a new thread.

For each run:
- messages: what the delivery posted into the thread after the writer answered
  (``chat.postMessage`` and file shares on Slack; message replies on Feishu); progress edits
  are not messages;
- seconds: from the writer's answer (its request reaching the zero-latency fake LLM) to the
  delivery's last call to the platform (the claim check in between is the same on both sides);
- delivery seconds: from the delivery's first call after the writer's answer to its last.

Goal (issue 56): one summary message, and at most 1.2x the parts' delivery time (medians).
Results go to ``bench/results/delivery.json``; the Markdown table is printed for the README.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import cpu_model
from tests.env import clean_environ

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "delivery.json"
SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_TOKEN = "xoxb-bench"
THEMES = (
    "efficiency at low temperatures",
    "installation and sizing",
    "running costs against gas and oil",
    "grid load and flexibility",
    "refrigerants and their rules",
    "noise and siting",
    "retrofit of old buildings",
    "field trials and their results",
)


def long_report(topic: str) -> str:
    """A depth-3 report of about 32 KB, citing sources 1-3 (a depth-3 run has at least as
    many): what the fake writer answers."""
    lines = [f"# {topic.capitalize()}", "", "## Executive summary", ""]
    lines += [
        "Cold-climate heat pumps now keep most of their output well below freezing [1]. "
        "Their running costs depend on the price of electricity against gas [2], and "
        "field trials show the gap between rated and measured efficiency narrowing [3].",
        "",
        "## Main findings",
        "",
    ]
    for i, theme in enumerate(THEMES):
        lines += [f"### {theme.capitalize()}", ""]
        for j in range(9):
            n = (i + j) % 3 + 1
            lines += [
                f"On {theme}, the studies reviewed report consistent results across the "
                f"regions they cover, with measured values close to those rated by the "
                f"makers in most of the {12 + j} sites observed over two winters [{n}]. "
                f"Where results differ, the difference follows installation quality and "
                f"the sizing of the emitters more than the make of the unit, and the "
                f"reports say so with care about what their samples can show [{n}].",
                "",
            ]
    lines += [
        "## Conclusions and recommendations",
        "",
        "Size the system for the coldest week and check the emitters first [1][2].",
        "",
        "## Open questions and uncertainties",
        "",
        "Long-term reliability data beyond ten years are still scarce [3].",
        "",
    ]
    return "\n".join(lines)


@dataclass
class Sample:
    messages: int
    seconds: float
    delivery_seconds: float
    document: str | None


@dataclass
class Side:
    samples: list[Sample] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "runs": len(self.samples),
            "messages": [s.messages for s in self.samples],
            "median_seconds": round(statistics.median(s.seconds for s in self.samples), 3),
            "median_delivery_seconds": round(
                statistics.median(s.delivery_seconds for s in self.samples), 3
            ),
            "documents": [s.document for s in self.samples],
            "seconds": [round(s.seconds, 3) for s in self.samples],
        }


async def slack_run(documents: bool, runs: int, latency: float, workdir: Path) -> Side:
    """``runs`` mentions, each a depth-3 research, through a served app against fake Slack."""
    from bots.server import create_app
    from storage import Database, Store
    from tests.chat_app import LifespanServer, fathom_settings, wait_for
    from tests.fakes import FakeLLMServer, FakeSearchServer
    from tests.fakes.llm import Reply
    from tests.fakes.slack import (
        FakeSlackServer,
        app_mention_event,
        event_callback_body,
        sign,
    )

    side = Side()
    url = f"sqlite:///{workdir / ('slack-doc.db' if documents else 'slack-parts.db')}"
    with FakeLLMServer() as llm, FakeSearchServer() as search, FakeSlackServer() as slack:
        settings = fathom_settings(
            url,
            llm,
            search,
            SLACK_BOT_TOKEN=BOT_TOKEN,
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_URL=slack.api_url,
            FATHOM_REPORT_DOCUMENT_PARTS="2" if documents else "0",
            FATHOM_READ_PAGES="0",
        )
        server = await asyncio.to_thread(LifespanServer(create_app(settings)).start)
        database = Database(url)
        store = Store(database)
        import httpx

        try:
            async with httpx.AsyncClient(timeout=30) as http:
                for _ in range(runs):
                    topic = f"cold-climate heat pumps {uuid.uuid4().hex[:6]}"
                    llm.fake.script("writer", Reply(long_report(topic)))
                    slack.fake.latency = latency
                    ts = f"{time.time():.6f}"
                    event = app_mention_event(f"{topic} depth=3", ts=ts)
                    body = event_callback_body(event, event_id=f"Ev{uuid.uuid4().hex}")
                    started = time.time()
                    answer = await http.post(
                        f"{server.url}/slack/events",
                        content=body,
                        headers={**sign(body, SECRET), "Content-Type": "application/json"},
                    )
                    answer.raise_for_status()

                    async def delivered(thread: str = ts) -> Any:
                        found = await store.runs.recent_runs_for_user("slack:T0001:U123", 100)
                        mine = [r for r in found if r.thread.thread == thread]
                        done = mine and mine[0].delivery in ("posted", "failed")
                        return mine[0] if done else None

                    run = await wait_for(delivered, within=120)
                    writer = [r.time for r in llm.fake.requests_for("writer") if r.time > started]
                    side.samples.append(
                        _slack_sample(slack.fake.calls, ts, writer[-1], run.report_document)
                    )
        finally:
            await database.dispose()
            await asyncio.to_thread(server.stop)
    return side


#: The Slack calls of a delivery (what it posts; status and edits are not its posts).
_SLACK_DELIVERY = ("chat.postMessage", "files.completeUploadExternal", "canvases.")


def _slack_sample(calls: list[Any], ts: str, written: float, document: Any) -> Sample:
    after = [c for c in calls if c.time > written and c.method.startswith(_SLACK_DELIVERY)]
    mine = [c for c in after if _in_thread(c.params, ts) or c.method.startswith("canvases.")]
    posts = [c for c in mine if not c.method.startswith("canvases.")]
    times = [c.time for c in mine]
    return Sample(
        messages=len(posts),
        seconds=max(times) - written,
        delivery_seconds=max(times) - min(times),
        document=document.kind if document is not None else None,
    )


def _in_thread(params: dict[str, Any], ts: str) -> bool:
    return str(params.get("thread_ts") or "") == ts


FEISHU_TOKEN = "bench-verification-token"
FEISHU_KEY = "bench-encrypt-key"


async def feishu_run(documents: bool, runs: int, latency: float, workdir: Path) -> Side:
    """``runs`` private messages, each a depth-3 research, through a served app against the
    fake Feishu Open API (webhook mode)."""
    import httpx

    from bots.server import create_app
    from storage import Database, Store
    from tests.chat_app import LifespanServer, fathom_settings, wait_for
    from tests.fakes import FakeLLMServer, FakeSearchServer
    from tests.fakes.feishu import (
        APP_ID,
        APP_SECRET,
        TENANT,
        FakeFeishuServer,
        encrypt,
        message_event,
        signed_headers,
    )
    from tests.fakes.llm import Reply

    side = Side()
    url = f"sqlite:///{workdir / ('feishu-doc.db' if documents else 'feishu-parts.db')}"
    with FakeLLMServer() as llm, FakeSearchServer() as search, FakeFeishuServer() as feishu:
        settings = fathom_settings(
            url,
            llm,
            search,
            FEISHU_APP_ID=APP_ID,
            FEISHU_APP_SECRET=APP_SECRET,
            FEISHU_VERIFICATION_TOKEN=FEISHU_TOKEN,
            FEISHU_ENCRYPT_KEY=FEISHU_KEY,
            FEISHU_DOMAIN=feishu.url,
            FEISHU_MODE="webhook",
            FATHOM_REPORT_DOCUMENT_PARTS="2" if documents else "0",
            FATHOM_READ_PAGES="0",
        )
        server = await asyncio.to_thread(LifespanServer(create_app(settings)).start)
        database = Database(url)
        store = Store(database)
        try:
            async with httpx.AsyncClient(timeout=30) as http:
                for _ in range(runs):
                    topic = f"cold-climate heat pumps {uuid.uuid4().hex[:6]}"
                    llm.fake.script("writer", Reply(long_report(topic)))
                    feishu.fake.latency = latency
                    message_id = f"om_{uuid.uuid4().hex}"
                    payload = message_event(
                        f"{topic} depth=3", token=FEISHU_TOKEN, message_id=message_id
                    )
                    feishu.fake.saw(payload)
                    body = json.dumps(encrypt(payload, FEISHU_KEY)).encode()
                    started = time.time()
                    answer = await http.post(
                        f"{server.url}/feishu/events",
                        content=body,
                        headers=signed_headers(body, FEISHU_KEY),
                    )
                    answer.raise_for_status()

                    async def delivered(topic: str = topic) -> Any:
                        user = f"feishu:{TENANT}:ou_user_1"
                        found = await store.runs.recent_runs_for_user(user, 100)
                        mine = [r for r in found if r.topic.startswith(topic)]
                        done = mine and mine[0].delivery in ("posted", "failed")
                        return mine[0] if done else None

                    run = await wait_for(delivered, within=120)
                    writer = [r.time for r in llm.fake.requests_for("writer") if r.time > started]
                    side.samples.append(
                        _feishu_sample(feishu.fake.calls, writer[-1], run.report_document)
                    )
        finally:
            await database.dispose()
            await asyncio.to_thread(server.stop)
    return side


def _feishu_sample(calls: list[Any], written: float, document: Any) -> Sample:
    """Replies in the thread (the report's cards, or the summary card) and the document's
    calls (docx and drive), after the writer's answer; card edits are not messages."""
    after = [c for c in calls if c.time > written]
    posts = [c for c in after if c.method == "POST" and c.path.endswith("/reply")]
    made = [c for c in after if "/docx/" in c.path or "/drive/" in c.path]
    times = [c.time for c in posts + made]
    return Sample(
        messages=len(posts),
        seconds=max(times) - written,
        delivery_seconds=max(times) - min(times),
        document=document.kind if document is not None else None,
    )


PLATFORMS: dict[str, Callable[[bool, int, float, Path], Any]] = {
    "slack": slack_run,
    "feishu": feishu_run,
}


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        "| platform | how | messages in the thread | writer's answer -> last post (median) "
        "| delivery alone (median) | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for platform, sides in results.items():
        before = sides["parts"]["median_seconds"]
        for how in ("parts", "document"):
            side = sides[how]
            ratio = side["median_seconds"] / before if before else float("nan")
            rows.append(
                f"| {platform} | {how} | {sorted(set(side['messages']))} "
                f"| {side['median_seconds']:.3f} s | {side['median_delivery_seconds']:.3f} s "
                f"| {ratio:.2f}x |"
            )
    return "\n".join(rows)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--api-latency", type=float, default=0.15)
    parser.add_argument("--platforms", default=",".join(PLATFORMS))
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    for name in set(os.environ) - set(clean_environ()):  # no Fathom setting of this shell
        del os.environ[name]
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for platform in args.platforms.split(","):
            run = PLATFORMS[platform]
            sides = {"parts": Side(), "document": Side()}
            for _ in range(args.runs):  # alternate, one run at a time
                for how in ("parts", "document"):
                    side = await run(how == "document", 1, args.api_latency, Path(tmp))
                    sides[how].samples += side.samples
            results[platform] = {how: side.summary() for how, side in sides.items()}
    report = {
        "api_latency": args.api_latency,
        "runs": args.runs,
        "cpu": cpu_model(),
        "python": sys.version.split()[0],
        "results": results,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
