"""Long reports as Feishu cloud documents: ``bots.feishu.docs`` with the real ``lark-oapi``
client against the fake Open API (``tests.fakes.feishu_docs``), whose endpoints answer as
Feishu's server API reference documents them (open.feishu.cn, read for this file):

- "创建文档" ``POST /open-apis/docx/v1/documents`` ``{folder_token, title}`` →
  ``data.document.document_id``; 3 calls a second, past it HTTP 400 with ``99991400``;
- "Markdown/HTML 内容转换为文档块" ``POST /open-apis/docx/v1/documents/blocks/convert`` →
  ``first_level_block_ids`` (the order) and ``blocks`` (in no order); tables' ``merge_info``
  is read-only and must be removed before the insert; at most 1,000 blocks per insert;
- "创建嵌套块" ``POST .../documents/:document_id/blocks/:block_id/descendant``
  ``{children_id, index, descendants}``;
- "增加协作者权限" ``POST /open-apis/drive/v1/permissions/:token/members?type=docx``
  ``{member_type: openchat|openid, member_id, perm: view}``; ``1063003`` when the tenant's
  controls forbid it;
- "更新云文档权限设置" ``PATCH /open-apis/drive/v2/permissions/:token/public?type=docx``
  ``{link_share_entity: closed|tenant_readable}``;
- "获取文件元数据" ``POST /open-apis/drive/v1/metas/batch_query`` ``with_url``;
- "删除文件或文件夹" ``DELETE /open-apis/drive/v1/files/:token?type=docx``, ``1061007`` once gone;
- "通用错误码": ``99991672`` a missing scope.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from bots.chat.documents import document_content
from bots.document_deletion import delete_documents
from bots.feishu.api import FeishuApi, FeishuError
from bots.feishu.delivery import FeishuPosters, FeishuThread
from bots.feishu.doc_blocks import MAX_BLOCKS
from bots.feishu.docs import Audience, DocsRefused, FeishuDocs
from bots.feishu.events import CHAT_TYPE
from bots.feishu.render import summary_card
from bots.feishu.settings import FeishuSettings
from core.chat.stores import RunRecord
from core.claims.summary import CheckSummary, ClaimSummary
from core.models import Source, Usage
from core.research.outcome import RunOutcome
from core.values import ReportDocument, RunStatus, ThreadKey
from storage import RunDocument
from storage.memory import MemoryStores
from tests.chat_app import ServedFathom, wait_for
from tests.conftest import ServeFathom
from tests.fakes import FakeLLMServer, Reply
from tests.fakes.feishu import (
    APP_ID,
    APP_SECRET,
    TENANT,
    FakeFeishu,
    FakeFeishuServer,
    FeishuMessage,
    card_buttons,
    encrypt,
    message_event,
    signed_headers,
)
from tests.fakes.feishu_docs import DOC_URL, MISSING_SCOPE, FakeDocument, doc_kind

SOURCES = [
    Source(n=1, title="Heat pumps in cold climates", url="https://example.org/heat"),
    Source(n=2, title="Grid study 2025", url="https://example.net/grid", published="2025-03-01"),
]
REPORT = """# Heat pumps

*Written 7 December 2026.*

## Executive summary

Heat pumps work in cold climates [1], and grids cope [2].

## Main findings

| Climate | COP |
|---|---|
| cold | 2.5 [1] |

![chart](https://example.org/chart.png)

```
code <at user_id="all"></at> stays code
```

## Sources

- [1] [Heat pumps in cold climates](https://example.org/heat)
- [2] [Grid study 2025](https://example.net/grid) (2025-03-01)
"""
CHAT = Audience("oc_chat_1", "ou_user_1")
USER = f"feishu:{TENANT}:ou_user_1"


@pytest.fixture
async def api(feishu_server: FakeFeishuServer) -> AsyncIterator[FeishuApi]:
    client = FeishuApi(APP_ID, APP_SECRET, feishu_server.url)
    yield client
    await client.aclose()


async def publish(docs: FeishuDocs, markdown: str = REPORT, **kwargs: object) -> object:
    args: dict[str, object] = {
        "tenant": TENANT,
        "title": "Heat pumps",
        "markdown": markdown,
        "sources": SOURCES,
        "quotes": {1: ["COP stays above 2 at -15 °C"]},
        "language": "en",
        "audience": CHAT,
    }
    args.update(kwargs)
    return await docs.publish(**args)  # type: ignore[arg-type]


async def test_a_report_becomes_one_document_shared_with_the_chat_as_view(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    fake = feishu_server.fake
    published = await publish(FeishuDocs(api))
    (document,) = fake.docs.live()
    assert published.document_id == document.document_id  # type: ignore[attr-defined]
    assert published.url == DOC_URL + document.document_id  # type: ignore[attr-defined]
    assert document.title == "Heat pumps" and document.folder_token == ""
    assert document.members == [
        {"member_type": "openchat", "member_id": "oc_chat_1", "perm": "view"}
    ]
    assert document.public["link_share_entity"] == "closed"  # nothing wider than the chat
    text = document.text()
    # The body in order (the title line is the document's title), the table's cells, the
    # image reduced to its alt text, code kept as code, then the sources with their quote.
    assert text.index("Executive summary") < text.index("Heat pumps work") < text.index("cold")
    assert "chart" in text and "Written 7 December 2026" in text
    assert "Written 7 December 2026" in text.splitlines()[0]
    assert "Sources" in text.splitlines()[-4]
    assert text.splitlines()[-3:] == [
        "[1] Heat pumps in cold climates",
        "“COP stays above 2 at -15 °C”",
        "[2] Grid study 2025 (2025-03-01)",
    ]
    assert set(document.links()) == {"https://example.org/heat", "https://example.net/grid"}
    kinds = [b["block_type"] for b in document.ordered_blocks()]
    assert 31 in kinds and 27 not in kinds  # the table went in (no merge_info), no image
    assert all(c.query == {"type": "docx"} for c in fake.calls_to("perm_member"))


async def test_a_big_report_is_inserted_in_order_in_batches_of_at_most_1000_blocks(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    lines = "\n".join(f"- finding number {i} [1]" for i in range(2500))
    await publish(FeishuDocs(api), f"# Big\n\n## Findings\n\n{lines}\n\n## Sources\n\n- [1] x\n")
    inserts = feishu_server.fake.calls_to("docx_insert")
    assert len(inserts) == 3
    assert all(len(c.body["descendants"]) <= MAX_BLOCKS for c in inserts)
    (document,) = feishu_server.fake.docs.live()
    findings = [line for line in document.text().splitlines() if line.startswith("finding")]
    assert findings == [f"finding number {i} [1]" for i in range(2500)]


async def test_tenant_sharing_lets_the_tenant_read_it_by_link_and_no_wider(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    await publish(FeishuDocs(api, sharing="tenant"))
    (document,) = feishu_server.fake.docs.live()
    assert document.public == {"link_share_entity": "tenant_readable"}
    assert [m["member_id"] for m in document.members] == ["oc_chat_1"]


async def test_a_one_to_one_chat_shares_it_with_the_requester(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    """ "增加协作者权限" names ``openchat`` a group's id; a one-to-one chat is none, so its
    one member, the requester, gets it by open id."""
    await publish(FeishuDocs(api), audience=Audience("oc_p2p", "ou_user_1", private=True))
    (document,) = feishu_server.fake.docs.live()
    assert document.members == [{"member_type": "openid", "member_id": "ou_user_1", "perm": "view"}]


async def test_a_missing_scope_refuses_documents_for_the_tenant_once(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    fake = feishu_server.fake
    fake.scopes["docx:document"] = False
    docs = FeishuDocs(api)
    with pytest.raises(DocsRefused) as first:
        await publish(docs)
    assert first.value.tenant_wide and first.value.first
    assert str(MISSING_SCOPE) in first.value.reason
    calls = len(fake.calls)
    with pytest.raises(DocsRefused) as second:
        await publish(docs)
    assert not second.value.first
    assert len(fake.calls) == calls  # not asked again
    fake.scopes["docx:document"] = True
    await publish(docs, tenant="tenant_2")  # another tenant is asked (and here may)
    with pytest.raises(DocsRefused):  # the first is still not asked until a restart
        await publish(docs)
    assert len(fake.docs.live()) == 1


async def test_a_tenant_policy_refusing_the_share_deletes_the_document(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    """ "增加协作者权限" 1063003: the tenant's controls forbid it. The document would be one
    nobody in the chat can open: it is deleted, and documents are refused for the tenant."""
    fake = feishu_server.fake
    fake.fail_next("perm_member", status=400, code=1063003)
    with pytest.raises(DocsRefused) as refused:
        await publish(FeishuDocs(api))
    assert refused.value.tenant_wide
    assert fake.docs.live() == [] and len(fake.docs.documents) == 1


async def test_a_share_that_fails_to_set_link_sharing_deletes_the_document(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    """A 5xx on the link setting: the document could be readable more widely than the
    setting says (the tenant's default), so it goes, and the error is retried by the job."""
    fake = feishu_server.fake
    fake.fail_next("perm_public", status=500, code=1066001)
    with pytest.raises(FeishuError) as failed:
        await publish(FeishuDocs(api))
    assert not failed.value.final
    assert fake.docs.live() == []


async def test_a_rate_limited_create_goes_to_the_job_and_leaves_nothing(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    """ "创建文档": past 3 calls a second, HTTP 400 with 99991400."""
    fake = feishu_server.fake
    fake.fail_next("docx_create", status=400, code=99991400)
    with pytest.raises(FeishuError) as limited:
        await publish(FeishuDocs(api))
    assert limited.value.rate_limited
    assert fake.docs.documents == {}


@pytest.mark.parametrize("body", ["", "<html>Bad Gateway</html>"])
async def test_an_outage_mid_insert_deletes_the_half_made_document(
    api: FeishuApi, feishu_server: FakeFeishuServer, body: str
) -> None:
    fake = feishu_server.fake
    if body:
        fake.fail_next("docx_insert", status=502, body="html")
    else:
        fake.fail_next("docx_insert", status=503, body="empty")
    with pytest.raises(FeishuError) as failed:
        await publish(FeishuDocs(api))
    assert not failed.value.final
    assert fake.docs.live() == [] and len(fake.calls_to("file_delete")) == 1


async def test_content_feishu_will_not_take_refuses_this_document_only(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    fake = feishu_server.fake
    fake.fail_next("docx_insert", status=400, code=1770006)  # schema mismatch
    docs = FeishuDocs(api)
    with pytest.raises(DocsRefused) as refused:
        await publish(docs)
    assert not refused.value.tenant_wide
    assert fake.docs.live() == []
    await publish(docs)  # the next report is tried
    assert len(fake.docs.live()) == 1


async def test_hostile_titles_quotes_and_links_stay_inert(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    """A source's title and quote, and the body, try mentions, tags and foreign links: the
    document links only the sources' own addresses and mentions nobody."""
    hostile = [
        Source(
            n=1,
            title='<at user_id="all">everyone</at> [win](https://evil.example)',
            url="https://example.org/a",
        ),
        Source(n=2, title="an internal note", url="jira://PROJ-1"),
    ]
    markdown = (
        '# T\n\n## Summary\n\nSee [this](https://evil.example/x) and <at user_id="ou_x"></at> '
        "@all [1] [2].\n\n## Sources\n\n- [1] x\n- [2] y\n"
    )
    quote = "**bold** <at id=all></at> [link](https://evil.example) @everyone"
    await publish(FeishuDocs(api), markdown, sources=hostile, quotes={1: [quote]})
    (document,) = feishu_server.fake.docs.live()
    assert set(document.links()) == {"https://example.org/a"}  # jira:// is no link
    text = document.text()
    assert "<at" not in text and "@all" not in text and "@everyone" not in text
    assert "evil.example" not in text  # not even as text a client could make a link of
    assert "“**bold** @\u2060" in text  # the quote's own characters, as literal text
    elements = [
        e
        for b in document.ordered_blocks()
        for k in ("text", "quote", "bullet")
        for e in b.get(k, {}).get("elements", [])
    ]
    assert elements and all(set(e) == {"text_run"} for e in elements)


async def test_a_chinese_report_gets_chinese_headings(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    markdown = "# 热泵\n\n## 摘要\n\n热泵在寒冷地区有效 [1]。\n\n## 来源\n\n- [1] [热泵](https://example.org/heat)\n"
    await publish(FeishuDocs(api), markdown, language="zh", title="热泵")
    (document,) = feishu_server.fake.docs.live()
    assert document.title == "热泵"
    lines = document.text().splitlines()
    assert lines[:2] == ["摘要", "热泵在寒冷地区有效 [1]。"]
    assert "来源" in lines and "Sources" not in lines


async def test_delete_moves_it_to_the_recycle_bin_and_a_gone_one_counts_as_deleted(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    docs = FeishuDocs(api)
    published = await publish(docs)
    document_id = published.document_id  # type: ignore[attr-defined]
    await docs.delete(document_id)
    assert feishu_server.fake.docs.live() == []
    await docs.delete(document_id)  # 1061007: gone already
    await docs.delete("doxcnNeverMade")  # 1061003: not found
    calls = feishu_server.fake.calls_to("file_delete")
    assert [c.query for c in calls] == [{"type": "docx"}] * 3


def a_run(chat_type: str = "group") -> RunRecord:
    key = f"feishu:{TENANT}:oc_chat_1:om_req"
    return RunRecord(
        id="r" * 32,
        thread_id=1,
        thread_key=key,
        thread=ThreadKey.parse(key),
        topic="heat pumps",
        depth=1,
        strategy="iterative",
        status=RunStatus.SUCCEEDED,
        rounds_done=1,
        requested_by=USER,
        dedupe_key=None,
        cancel_requested=False,
        progress_message_id=None,
        error=None,
        notes=[],
        report_markdown=None,
        llm_calls=0,
        prompt_tokens=0,
        completion_tokens=0,
        searches=0,
        created_at=datetime.now(UTC),
        started_at=None,
        finished_at=None,
        heartbeat_at=None,
        platform_context={CHAT_TYPE: chat_type},
    )


def _claim(**fields: object) -> ClaimSummary:
    return ClaimSummary.model_validate({"text": "x", "cited": [1], **fields})


async def test_quotes_show_only_for_supported_claims_and_the_summary_card_links_the_document(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    """Through the poster's hooks with the shared layer's content (``document_content``):
    source 1's supported claim shows its quote; source 2's claims (one marked unverified, one
    partial) show none. The summary card: the executive summary, the claim-check line, the
    document's button, 👍/👎."""
    check = CheckSummary(
        claims=[
            _claim(verdict="supported", quote="COP 2.6 at -15 °C.", quote_source=1),
            _claim(verdict="unsupported", fixed="unverified", quote="not so", quote_source=2),
            _claim(verdict="partial", quote="half of it", quote_source=2),
        ]
    )
    outcome = RunOutcome(
        run_id="r" * 32,
        thread=f"feishu:{TENANT}:oc_chat_1:om_req",
        status=RunStatus.SUCCEEDED,
        topic="heat pumps",
        depth=1,
        topics=["heat pumps"],
        report_markdown=REPORT,
        sources=SOURCES,
        usage=Usage(),
        seconds=1.0,
        claims=check,
    )
    content = document_content(outcome, "en")
    poster = FeishuThread(a_run(), api, docs=FeishuDocs(api))
    document = await poster.create_document(content)
    (made,) = feishu_server.fake.docs.live()
    assert (document.kind, document.id, document.url) == (
        "docx",
        made.document_id,
        DOC_URL + made.document_id,
    )
    text = made.text()
    assert "“COP 2.6 at -15 °C.”" in text
    assert "not so" not in text and "half of it" not in text
    (part,) = poster.summary_parts(outcome, content, document)
    card = json.loads(part.content)
    shown = card["body"]["elements"][0]["content"]
    assert "Heat pumps work in cold climates" in shown and "Main findings" not in shown
    assert check.note("en") in shown
    assert "](https://example.org/heat)" in shown  # citations link their sources
    message = FeishuMessage("om_x", "oc_chat_1", "interactive", part.content)
    buttons = card_buttons(message)
    assert buttons[0]["behaviors"] == [{"type": "open_url", "default_url": document.url}]
    assert [b["behaviors"][0]["value"]["action"] for b in buttons[1:]] == [
        "fathom_up",
        "fathom_down",
    ]


# -- end to end: the real ``fathom serve`` with Feishu alone, against the fakes ------------

TOKEN = "feishu-verification-token"
KEY = "feishu-encrypt-key"
SECTION = "Heat pumps keep their efficiency in cold climates, as field data shows [1]. " * 60
LONG = "# Heat pumps\n\n## Executive summary\n\nThey work in the cold [1].\n\n" + "".join(
    f"## Part {i}\n\n{SECTION}\n\n" for i in range(1, 5)
)


@dataclass
class FeishuBot:
    served: ServedFathom
    fake: FakeFeishu

    async def ask(self, text: str, message_id: str, **event: Any) -> None:
        payload = message_event(text, token=TOKEN, message_id=message_id, **event)
        self.fake.saw(payload)
        body = json.dumps(encrypt(payload, KEY)).encode()
        answer = await self.served.http.post(
            f"{self.served.url}/feishu/events", content=body, headers=signed_headers(body, KEY)
        )
        assert answer.status_code == 200

    async def delivered(self, count: int = 1) -> list[RunRecord]:
        return await self.served.delivered(USER, count)


@pytest.fixture
async def feishu(
    serve_fathom: ServeFathom, feishu_server: FakeFeishuServer
) -> AsyncIterator[Callable[..., Awaitable[FeishuBot]]]:
    async def start(**env: str) -> FeishuBot:
        served = await serve_fathom(
            FEISHU_APP_ID=APP_ID,
            FEISHU_APP_SECRET=APP_SECRET,
            FEISHU_VERIFICATION_TOKEN=TOKEN,
            FEISHU_ENCRYPT_KEY=KEY,
            FEISHU_DOMAIN=feishu_server.url,
            FEISHU_MODE="webhook",
            FATHOM_FEISHU_EDIT_INTERVAL="0.05",
            **env,
        )
        return FeishuBot(served, feishu_server.fake)

    yield start


def document_url(document: FakeDocument) -> str:
    return DOC_URL + document.document_id


def docs_calls(fake: FakeFeishu) -> list[str]:
    return [kind for c in fake.calls if (kind := doc_kind(c.method, c.path)) is not None]


async def test_a_long_report_becomes_one_document_and_one_summary_card(
    feishu: Callable[..., Awaitable[FeishuBot]], llm_server: FakeLLMServer
) -> None:
    bot = await feishu()
    llm_server.fake.script("writer", Reply(LONG))
    await bot.ask("/research heat pumps depth=1", "om_long", chat_type="group", mention_bot=True)
    (run,) = await bot.delivered()
    fake = bot.fake
    (document,) = fake.docs.live()
    assert run.report_document is not None
    assert run.report_document.kind == "docx" and run.report_document.id == document.document_id
    assert document.members == [
        {"member_type": "openchat", "member_id": "oc_chat_1", "perm": "view"}
    ]
    assert document.public["link_share_entity"] == "closed"
    text = document.text()
    assert [line for line in text.splitlines() if line.startswith("Part ")] == [
        f"Part {i}" for i in range(1, 5)
    ]
    assert text.count("field data shows [1]") == 240  # every paragraph, in order
    assert "Sources" in text.splitlines()
    # The source's quote (the fake verifier supports every claim) under it, as a quote.
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("[1] "))
    assert lines[at + 1].startswith("“") and lines[at + 1].endswith("”")
    # The thread: the progress card, then one summary card and no report cards.
    _, summary = fake.thread("om_long")
    assert summary.uuid == f"{run.id}:summary"
    assert "They work in the cold" in summary.markdown and "Part 2" not in summary.markdown
    buttons = card_buttons(summary)
    opener = buttons[0]["behaviors"][0]
    assert opener == {"type": "open_url", "default_url": DOC_URL + document.document_id}
    actions = [b["behaviors"][0].get("value", {}).get("action") for b in buttons[1:]]
    assert len(actions) == 2 and all(actions)  # 👍 and 👎
    assert docs_calls(fake).count("docx_create") == 1
    assert run.delivery == "posted"


async def test_a_short_report_stays_one_card_and_makes_no_document(
    feishu: Callable[..., Awaitable[FeishuBot]],
) -> None:
    bot = await feishu()
    await bot.ask("/research heat pumps depth=1", "om_short")
    (run,) = await bot.delivered()
    assert docs_calls(bot.fake) == []
    _, report = bot.fake.thread("om_short")
    assert report.uuid == f"{run.id}:r1" and run.report_document is None


async def test_a_missing_scope_falls_back_to_cards_once_and_the_tenant_is_not_asked_again(
    feishu: Callable[..., Awaitable[FeishuBot]],
    llm_server: FakeLLMServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ "创建文档" without ``docx:document``: Feishu answers 99991672. The report goes as the
    usual cards, each once, with one line in the logs; the tenant's next long report goes
    straight to cards, without a call."""
    bot = await feishu()
    bot.fake.scopes["docx:document"] = False
    llm_server.fake.script("writer", Reply(LONG))
    caplog.set_level(logging.WARNING)
    await bot.ask("/research heat pumps depth=1", "om_a")
    (run,) = await bot.delivered()
    # (the body's conversion goes with the create: it needs no document; no document was made)
    assert sorted(docs_calls(bot.fake)) == ["docx_convert", "docx_create"]
    cards = bot.fake.thread("om_a")[1:]
    assert len(cards) >= 2 and len(cards) + 1 == run.report_parts_posted  # (+ the step)
    assert [c.uuid for c in cards] == [f"{run.id}:r{n}" for n in range(1, len(cards) + 1)]
    assert run.report_document is not None and run.report_document.refused
    llm_server.fake.script("writer", Reply(LONG))
    await bot.ask("/research wind power depth=1", "om_b", chat_id="oc_chat_2")
    await bot.delivered(2)
    assert sorted(docs_calls(bot.fake)) == ["docx_convert", "docx_create"]  # not asked again
    assert len(bot.fake.thread("om_b")) >= 3
    said = [r for r in caplog.records if str(MISSING_SCOPE) in r.getMessage()]
    assert len(said) == 1


async def test_tenant_sharing_and_a_folder_come_from_the_settings(
    feishu: Callable[..., Awaitable[FeishuBot]], llm_server: FakeLLMServer
) -> None:
    bot = await feishu(FATHOM_FEISHU_DOC_SHARING="tenant", FATHOM_FEISHU_DOC_FOLDER="fldcnReports")
    bot.fake.docs.folders.add("fldcnReports")
    llm_server.fake.script("writer", Reply(LONG))
    await bot.ask("/research heat pumps depth=1", "om_t")
    await bot.delivered()
    (document,) = bot.fake.docs.live()
    assert document.folder_token == "fldcnReports"
    assert document.public["link_share_entity"] == "tenant_readable"
    # A private chat: the requester reads it (a one-to-one chat is no group to share with).
    assert document.members == [{"member_type": "openid", "member_id": "ou_user_1", "perm": "view"}]


async def test_a_summary_that_fails_is_retried_without_a_second_document(
    feishu: Callable[..., Awaitable[FeishuBot]], llm_server: FakeLLMServer
) -> None:
    """The document is made and recorded, then the summary card's send fails (a 502 whose
    card Feishu kept): the retried delivery reads the recorded document, makes no second
    one, and Feishu returns the card it has for the summary's uuid."""
    bot = await feishu(FATHOM_DELIVERY_BACKOFF="0.05")
    llm_server.fake.script("writer", Reply(LONG))
    llm_server.fake.latency = 0.3  # the failures are armed before the report is written
    await bot.ask("/research heat pumps depth=1", "om_r")
    await wait_for(lambda: bot.fake.thread("om_r"))  # the progress card is out
    bot.fake.fail_next("metas", status=502, body="html")  # the first document's link
    bot.fake.fail_next("reply", status=502, after=True)  # the summary, its answer lost
    llm_server.fake.latency = 0.0
    (run,) = await bot.delivered()
    assert run.delivery == "posted"
    # The first try's document was deleted when its link failed; the second was kept.
    assert docs_calls(bot.fake).count("docx_create") == 2
    (document,) = bot.fake.docs.live()
    assert run.report_document is not None and run.report_document.id == document.document_id
    _, summary = bot.fake.thread("om_r")
    assert summary.uuid == f"{run.id}:summary"
    sends = [c for c in bot.fake.calls_to("reply") if c.body["uuid"] == f"{run.id}:summary"]
    assert len(sends) == 2
    assert docs_calls(bot.fake).count("docx_create") == 2  # not a third


async def test_a_rate_limited_create_is_retried_by_the_job(
    feishu: Callable[..., Awaitable[FeishuBot]], llm_server: FakeLLMServer
) -> None:
    """ "创建文档": past 3 calls a second Feishu answers HTTP 400 with 99991400."""
    bot = await feishu(FATHOM_DELIVERY_BACKOFF="0.05")
    bot.fake.fail_next("docx_create", status=400, code=99991400)
    llm_server.fake.script("writer", Reply(LONG))
    await bot.ask("/research heat pumps depth=1", "om_rl")
    (run,) = await bot.delivered()
    assert docs_calls(bot.fake).count("docx_create") == 2
    assert len(bot.fake.docs.live()) == 1
    assert run.report_document is not None and run.report_document.kind == "docx"
    assert len(bot.fake.thread("om_rl")) == 2


async def test_a_chinese_run_makes_a_chinese_document_and_summary(
    feishu: Callable[..., Awaitable[FeishuBot]], llm_server: FakeLLMServer
) -> None:
    bot = await feishu()
    section = "这一部分讨论热泵的效率与成本，并引用来源 [1]。" * 120
    report = "# 热泵报告\n\n## 摘要\n\n热泵在寒冷地区有效 [1]。\n\n" + "".join(
        f"## 第{i}部分\n\n{section}\n\n" for i in range(1, 5)
    )
    llm_server.fake.script("writer", Reply(report))
    await bot.ask("/research 热泵 depth=1", "om_zh")
    await bot.delivered()
    (document,) = bot.fake.docs.live()
    assert document.title == "热泵报告"
    lines = document.text().splitlines()
    assert "来源" in lines and "Sources" not in lines
    _, summary = bot.fake.thread("om_zh")
    assert card_buttons(summary)[0]["text"]["content"] == "打开完整报告"
    assert "热泵在寒冷地区有效" in summary.markdown


def test_the_summary_card_keeps_untrusted_text_inert() -> None:
    """The executive summary and the claim-check line are the report's text: no ``<at>`` tag
    works in the card, and the only link that is not a citation is the document's button."""
    card = summary_card(
        'Report <at user_id="all"></at>',
        'Grids cope [2]. <at user_id="ou_x">X</at> <font color="red">loud</font>',
        SOURCES,
        "Citations checked <at id=all></at>",
        DOC_URL + "doxcn1",
        language="en",
    )
    data = json.loads(card)
    shown = data["body"]["elements"][0]["content"]
    assert "<at" not in shown and "<font" not in shown
    assert "[[2]](https://example.net/grid)" in shown
    assert "<at" not in data["header"]["title"]["content"]
    message = FeishuMessage("om_x", "oc_chat_1", "interactive", card)
    assert [b["behaviors"][0]["type"] for b in card_buttons(message)] == ["open_url"]


@pytest.mark.parametrize("folder", ["../fld", "fld/x", "fld?type=x"])
def test_a_folder_setting_that_is_no_token_is_refused(
    folder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FATHOM_FEISHU_DOC_FOLDER", folder)
    with pytest.raises(ValueError, match="folder token"):
        FeishuSettings()


async def test_forget_and_retention_delete_feishu_documents_or_name_those_left(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    """``bots.document_deletion`` through the real ``FeishuPosters``: a document Fathom made
    goes to the recycle bin, one already gone counts as deleted, and without the scope to
    delete ("删除文件或文件夹": ``space:document:delete`` or ``drive:drive``) the document is
    named with Feishu's answer and its address."""
    fake = feishu_server.fake
    docs = FeishuDocs(api)
    posters = FeishuPosters(api, MemoryStores(), docs=docs)
    made = [await publish(docs) for _ in range(3)]
    thread = ThreadKey.parse(f"feishu:{TENANT}:oc_chat_1:om_req")
    first, second, third = (
        ReportDocument(kind="docx", id=m.document_id, url=m.url)  # type: ignore[attr-defined]
        for m in made
    )
    await docs.delete(second.id)  # gone before the forget
    left = await delete_documents(
        [RunDocument(thread, first), RunDocument(thread, second)], {"feishu": posters}
    )
    assert left == []
    assert [d.document_id for d in fake.docs.live()] == [third.id]
    fake.scopes["space:document:delete"] = False
    (kept,) = await delete_documents([RunDocument(thread, third)], {"feishu": posters})
    assert str(MISSING_SCOPE) in kept.line() and third.url in kept.line()
    assert [d.document_id for d in fake.docs.live()] == [third.id]


async def test_a_delivery_cancelled_mid_document_deletes_what_it_made(
    api: FeishuApi, feishu_server: FakeFeishuServer
) -> None:
    """A shutdown cancels the delivery while the blocks go in: the next attempt (any replica)
    makes its own document, so this one is deleted, not left unrecorded in the app's space."""
    fake = feishu_server.fake
    release = threading.Event()
    fake.holds["docx_insert"] = release
    task = asyncio.create_task(publish(FeishuDocs(api)))
    try:
        await wait_for(lambda: fake.held == ["docx_insert"])
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()
    assert fake.docs.live() == [] and len(fake.calls_to("file_delete")) == 1


async def test_a_long_digest_is_a_document_with_its_summary_in_the_digest_s_thread(
    feishu: Callable[..., Awaitable[FeishuBot]], llm_server: FakeLLMServer
) -> None:
    """A digest takes the same path: its card opens a new thread in the group, the document
    is shared with that group, and the summary replies in the new thread."""
    from core.operations.digests import DigestService
    from storage import DigestStore

    bot = await feishu(FATHOM_STALE_RUN_AFTER="4")  # the sweep takes queued runs every 2 s
    await bot.ask(
        '/research schedule "heat pumps" cron="0 9 * * MON" depth=1',
        "om_sched",
        chat_type="group",
        chat_id="oc_group_9",
        mention_bot=True,
    )
    await wait_for(lambda: bot.fake.thread("om_sched"))
    digests = DigestService(
        DigestStore(bot.served.database),
        bot.served.store.runs,
        min_interval=3600,
        grace=3600,
        max_per_channel=10,
    )
    (digest,) = await digests.digests.all()
    llm_server.fake.script("writer", Reply(LONG))
    run, created = await digests.fire(digest, datetime(2026, 12, 7, 1, 0, tzinfo=UTC))
    assert created and run is not None
    (done,) = await bot.delivered()
    opener = bot.fake.messages[done.progress_message_id or ""]
    assert opener.root_id == "" and opener.chat_id == "oc_group_9"
    (document,) = bot.fake.docs.live()
    assert document.members == [
        {"member_type": "openchat", "member_id": "oc_group_9", "perm": "view"}
    ]
    (summary,) = bot.fake.thread(opener.message_id)
    assert summary.uuid == f"{done.id}:summary"
    assert card_buttons(summary)[0]["behaviors"][0]["default_url"] == document_url(document)
