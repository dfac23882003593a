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

import logging
from collections.abc import AsyncIterator

import pytest

from bots.feishu.api import FeishuApi, FeishuError
from bots.feishu.doc_blocks import MAX_BLOCKS
from bots.feishu.docs import Audience, DocsRefused, FeishuDocs
from core.models import Source
from tests.fakes.feishu import APP_ID, APP_SECRET, TENANT, FakeFeishuServer
from tests.fakes.feishu_docs import DOC_URL, MISSING_SCOPE

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
    api: FeishuApi, feishu_server: FakeFeishuServer, caplog: pytest.LogCaptureFixture
) -> None:
    fake = feishu_server.fake
    fake.scopes["docx:document"] = False
    docs = FeishuDocs(api)
    caplog.set_level(logging.WARNING, logger="bots.feishu")
    with pytest.raises(DocsRefused) as first:
        await publish(docs)
    assert first.value.tenant_wide and first.value.first
    assert str(MISSING_SCOPE) in first.value.reason
    calls = len(fake.calls)
    with pytest.raises(DocsRefused) as second:
        await publish(docs)
    assert not second.value.first
    assert len(fake.calls) == calls  # not asked again
    lines = [r for r in caplog.records if "refused cloud documents" in r.getMessage()]
    assert len(lines) == 1 and TENANT in lines[0].getMessage()
    assert fake.docs.live() == []


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
