"""A long report as one document and a summary (issue 56), on the shared layer: the in-memory
chat that makes documents (``MemoryChat(documents=True)``) against the real job, stores and
runners on SQLite and PostgreSQL. What a platform makes of it (a Slack canvas, a Feishu cloud
document) is tested with each platform's fakes; here: one document and one summary, a short
report stays one message, a refusal delivers the usual parts once, a resumed delivery never
makes a second document, and a document API that keeps failing falls back to the parts."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from sqlalchemy import update

from bots.chat.documents import (
    SUMMARY_CHARS,
    document_content,
    executive_summary,
    without_sources,
)
from bots.chat.memory import MemoryChat, Outage, Refusal
from core.claims.summary import CheckSummary, ClaimSummary
from core.models import Source, Usage
from core.research.outcome import RunOutcome
from core.values import DeliveryState, ReportDocument, RunStatus
from storage import RunRecord
from storage.tables import ResearchRun
from tests.runs import age_heartbeat
from tests.test_run_lifecycle import ReplicaFactory, replicas, submit  # noqa: F401 - fixture

REPORT = """# Heat pumps in cold climates

*Written 7 December 2026.*

## Executive summary

Modern heat pumps keep heating at -25 °C [1].

They cost less to run than oil boilers [2].

## Main findings

Details [1][2].

## Sources

- [1] [Cold-climate study](https://example.org/study) (2025-01-02)
- [2] [Running costs](https://example.org/costs)
"""


@pytest.fixture
def chat() -> MemoryChat:
    """A chat whose reports have a part per section, and that makes documents."""
    return MemoryChat(part_per_section=True, documents=True)


# -- what a document holds ----------------------------------------------------------------


def _outcome(markdown: str = REPORT, claims: CheckSummary | None = None) -> RunOutcome:
    return RunOutcome(
        run_id="r1",
        thread="memory:W1:C1:t1",
        status=RunStatus.SUCCEEDED,
        topic="heat pumps",
        depth=2,
        topics=[],
        report_markdown=markdown,
        sources=[
            Source(n=1, title="Cold-climate study", url="https://example.org/study"),
            Source(n=2, title="Running costs", url="https://example.org/costs"),
        ],
        usage=Usage(),
        seconds=1.0,
        claims=claims,
    )


def test_the_document_lists_each_sources_supporting_quotes_inert() -> None:
    claims = CheckSummary(
        claims=[
            ClaimSummary(
                text="Modern heat pumps keep heating at -25 °C [1].",
                cited=[1],
                verdict="supported",
                quote="Units kept 100% output at -25 °C <@U123> see [x](https://evil.example)",
                quote_source=1,
            ),
            ClaimSummary(
                text="They cost less [2].",
                cited=[2],
                verdict="unsupported",
                fixed="unverified",
                quote="not evidence",
                quote_source=2,
            ),
        ]
    )
    content = document_content(_outcome(claims=claims), "en")
    assert content.title == "Heat pumps in cold climates"
    (quote,) = content.quotes[1]
    assert quote.startswith("Units kept 100% output at -25 °C")
    assert "<@U123>" not in quote and "evil.example" not in quote and "](" not in quote
    assert 2 not in content.quotes  # an unverified claim shows no quote
    # The generated sources list is each platform's to render, from the sources and quotes.
    assert "## Sources" not in content.markdown and "## Main findings" in content.markdown
    assert [s.n for s in content.sources] == [1, 2]
    assert (
        content.summary.startswith("Modern heat pumps") and "Main findings" not in content.summary
    )
    assert content.claims_line is not None and "1" in content.claims_line


def test_a_chinese_reports_sources_list_is_left_out_and_its_summary_read() -> None:
    markdown = "# 热泵\n\n## 摘要\n\n热泵在零下二十五度仍能供暖 [1]。\n\n## 来源\n\n- [1] [研究](https://example.org/s)\n"
    assert without_sources(markdown) == "# 热泵\n\n## 摘要\n\n热泵在零下二十五度仍能供暖 [1]。\n"
    assert executive_summary(markdown) == "热泵在零下二十五度仍能供暖 [1]。"


def test_only_the_last_sources_heading_ends_the_report() -> None:
    """A section the writer itself called Sources stays; the generated list (the last) goes."""
    markdown = (
        "# T\n\n## Sources\n\nOn sources [1].\n\n## Sources\n\n- [1] [A](https://a.example)\n"
    )
    assert without_sources(markdown) == "# T\n\n## Sources\n\nOn sources [1].\n"
    assert without_sources("# T\n\nNo list.\n") == "# T\n\nNo list.\n"


def test_the_summary_is_cut_at_a_paragraph_or_a_word() -> None:
    para = "word " * 400
    markdown = f"# T\n\n## Summary\n\nShort first.\n\n{para}\n\n## Next\n\nx"
    assert executive_summary(markdown) == "Short first."
    long = executive_summary(f"# T\n\n## Summary\n\n{para}")
    assert len(long) <= SUMMARY_CHARS and long.endswith("word…")


# -- the delivery -------------------------------------------------------------------------


async def test_a_long_report_becomes_one_document_and_one_summary(
    replicas: ReplicaFactory,  # noqa: F811
    chat: MemoryChat,
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=2, name="long")
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.delivery == "posted"
    assert len(chat.documents) == 1
    (document,) = chat.documents.values()
    assert final.report_document == ReportDocument(
        kind="memo", id=document.id, url=f"memo://{document.id}"
    )
    assert document.markdown.startswith((final.report_markdown or "").split("\n## ")[0])
    shown = chat.shown(run.id)
    assert len(shown.parts) == 1 and f"memo://{document.id}" in shown.parts[0]
    assert final.report_parts_posted == 2  # the document step and the summary
    (summary,) = chat.messages(final.thread_key, "report")
    assert summary.buttons  # the feedback buttons are on the summary


async def test_a_short_report_stays_one_message(
    replicas: ReplicaFactory,  # noqa: F811
    chat: MemoryChat,
) -> None:
    chat.part_per_section = False
    chat.report_limit = 100_000
    a = await replicas(start=False)
    run = await submit(a, depth=1, name="short")
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.delivery == "posted"
    assert chat.documents == {} and final.report_document is None
    assert chat.shown(run.id).parts == [(final.report_markdown or "").strip()]


async def test_a_refused_document_delivers_the_usual_parts_once_and_says_so_once(
    replicas: ReplicaFactory,  # noqa: F811
    chat: MemoryChat,
    caplog: pytest.LogCaptureFixture,
) -> None:
    chat.document_refusal = "missing_scope: canvases:write"
    a = await replicas(start=False)
    with caplog.at_level(logging.WARNING, logger="bots.chat.delivery"):
        first = await submit(a, depth=2, name="refused-1")
        await a.job(first.id)
        second = await submit(a, depth=2, name="refused-2")
        await a.job(second.id)
    for run_id in (first.id, second.id):
        final = await a.store.runs.get_run(run_id)
        assert final is not None and final.delivery == "posted"
        assert final.report_document is not None and final.report_document.refused
        parts = chat.shown(run_id).parts
        assert "\n".join(parts) == (final.report_markdown or "").strip()  # all, once, in order
        assert final.report_parts_posted == len(parts) + 1
    assert chat.documents == {}
    said = [r for r in caplog.records if "missing_scope" in r.getMessage()]
    assert len(said) == 1  # one line in the logs, for the first refusal only


@pytest.mark.parametrize("stale", [False, True], ids=["fresh", "stale-read"])
async def test_a_resumed_delivery_posts_the_summary_without_a_second_document(
    replicas: ReplicaFactory,  # noqa: F811
    chat: MemoryChat,
    monkeypatch: pytest.MonkeyPatch,
    stale: bool,
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=2, name="resumed")
    chat.fail("report", Refusal("gone"))  # the summary is refused: the delivery fails
    await a.job(run.id)
    done = await a.store.runs.get_run(run.id)
    assert done is not None and done.delivery == "failed"
    assert done.report_document is not None and len(chat.documents) == 1
    assert done.report_parts_posted == 1  # the document step only
    # Redo it as a runner that died after the document step would leave it.
    async with a.database.sessionmaker.begin() as session:
        await session.execute(
            update(ResearchRun)
            .where(ResearchRun.id == run.id)
            .values(delivery="pending", delivery_attempts=0)
        )
    await age_heartbeat(a.database, run.id)
    b = await replicas(start=False)
    if stale:
        # The run as read before the claim, as a runner racing the one that took the document
        # step would have read it: the claim's fresh record must win.
        fresh = b.store.runs.get_run
        before = replace(done, delivery=DeliveryState.PENDING, report_parts_posted=0)
        before = replace(before, report_document=None, delivery_attempts=0)

        async def read_once(run_id: str) -> RunRecord | None:
            monkeypatch.setattr(b.store.runs, "get_run", fresh)
            return before

        monkeypatch.setattr(b.store.runs, "get_run", read_once)
        await b.job(run.id)
    else:
        assert await b.runner.sweep() == [run.id]
        await b.runner.drain()
    final = await b.store.runs.get_run(run.id)
    assert final is not None and final.delivery == "posted"
    assert [op for op, _ in chat.calls].count("document") == 1  # no second document
    (summary,) = chat.shown(run.id).parts
    assert done.report_document.url in summary


async def test_a_document_api_that_keeps_failing_falls_back_to_the_parts(
    replicas: ReplicaFactory,  # noqa: F811
    chat: MemoryChat,
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=2, name="failing")
    chat.fail("document", Outage("HTTP 503"), Outage("HTTP 502"), Outage("HTTP 500"))
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.delivery == "posted"
    assert final.report_document == ReportDocument(kind="parts", reason="Outage: HTTP 500")
    assert [op for op, _ in chat.calls].count("document") == 3
    parts = chat.shown(run.id).parts
    assert "\n".join(parts) == (final.report_markdown or "").strip()


async def test_a_document_api_failing_once_is_tried_again(
    replicas: ReplicaFactory,  # noqa: F811
    chat: MemoryChat,
) -> None:
    a = await replicas(start=False)
    run = await submit(a, depth=2, name="flaky")
    chat.fail("document", Outage("HTTP 503"))
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.delivery == "posted"
    assert final.report_document is not None and final.report_document.kind == "memo"
    assert len(chat.documents) == 1 and len(chat.shown(run.id).parts) == 1


async def test_documents_can_be_turned_off(
    replicas: ReplicaFactory,  # noqa: F811
    chat: MemoryChat,
) -> None:
    chat.document_parts = 0
    a = await replicas(start=False)
    run = await submit(a, depth=2, name="off")
    await a.job(run.id)
    final = await a.store.runs.get_run(run.id)
    assert final is not None and final.report_document is None and chat.documents == {}
    assert "\n".join(chat.shown(run.id).parts) == (final.report_markdown or "").strip()
