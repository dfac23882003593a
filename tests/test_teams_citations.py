"""Teams' citations on report parts (issue 56, item 3): the real Teams delivery and Bot
Connector client against the fake Bot Connector on 127.0.0.1.

The shape and limits are Microsoft's: "Enhance AI-generated bot messages" (msteams-docs,
``msteams-platform/bots/how-to/bot-messages-ai-generated-content.md``, ms.date 01/09/2025) and
"Add citations and sensitivity labels to agent messages" (msteams-docs, ms.date 07/14/2026):
one root entity ``{"type": "https://schema.org/Message", "@type": "Message", "@context":
"https://schema.org", "additionalType": ["AIGeneratedContent"], "citation": [...]}``, each
citation ``{"@type": "Claim", "position": <int, unique, the [n] of the text>, "appearance":
{"@type": "DigitalDocument", "name" (max 80 characters), "url", "abstract" (max 160)}}``, and
400 for "Bot message with more than 20 citations". The in-text marker is ``[n]``: Microsoft's
own ``Utilities.getUsedCitations`` (teams-ai, Agents-for-js) matches ``/\\[(\\d+)\\]/``. The
abstract is required by Microsoft's SDKs (Teams SDK's ``CitationAppearance.Abstract``, the
Agents SDK's ``ClientCitation``), optional in the docs' table: Fathom always sends one.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bots.chat.delivery import ChatDelivery
from bots.teams.api import TeamsApi, TeamsError
from bots.teams.citations import ABSTRACT_CHARS, MAX_CITATIONS, NAME_CHARS
from bots.teams.delivery import TeamsPosters
from bots.teams.events import translate
from bots.teams.render import report_parts
from core.claims.summary import CheckSummary, ClaimSummary
from core.models import Source, Usage
from core.research.outcome import RunOutcome
from core.untrusted import WORD_JOINER
from core.values import RunStatus, ThreadKey
from storage import RunRecord, Store
from tests.fakes.teams import (
    APP_ID,
    APP_PASSWORD,
    BOT_ID,
    MAX_ACTIVITY_BYTES,
    MESSAGE_ENTITY,
    TENANT,
    FakeTeamsServer,
    Posted,
    channel_message,
)

CHANNEL = "19:citations@thread.tacv2"
#: A marker as Teams matches it, not the text of a Markdown link.
MARKER = re.compile(r"(?<!\[)\[(\d+)\](?!\()")
SUPPORTED = "Air-source heat pumps kept a COP above 2 at -15 C in the field trial."
UNVERIFIED = "Heat pumps never need a backup heater anywhere."


@pytest.fixture
async def api(teams_server: FakeTeamsServer) -> AsyncIterator[TeamsApi]:
    async with httpx.AsyncClient(timeout=5.0) as http:
        yield TeamsApi(
            http, app_id=APP_ID, app_password=APP_PASSWORD, token_url=teams_server.token_url()
        )


async def _run(store: Store, server: FakeTeamsServer, topic: str) -> RunRecord:
    """A research asked in a channel of the fake, as the bot reads the request."""
    request = translate(
        channel_message(server.url, f"research {topic}", channel_id=CHANNEL), BOT_ID
    )
    assert request is not None
    message = request.message
    run, _ = await store.runs.create_run(
        thread=ThreadKey.parse(f"teams:{TENANT}:{message.channel}:{message.thread}"),
        topic=topic,
        depth=3,
        strategy="iterative",
        requested_by=f"teams:{TENANT}:U1",
        platform_context=message.context,
    )
    return run


def _sources(count: int) -> list[Source]:
    return [
        Source(n=n, title=f"Field study {n}", url=f"https://s{n}.example/report")
        for n in range(1, count + 1)
    ]


def _report(sources: list[Source], sections: int, language: str = "en") -> str:
    """A depth-3-sized report: each section cites two sources, Sources lists them all."""
    sentence = (
        "Heat pumps move heat rather than make it [{a}], and cold climates cost them "
        "efficiency [{b}]. "
        if language == "en"
        else "热泵搬运热量而不是产生热量 [{a}]，寒冷气候会降低其效率 [{b}]。"
    )
    body = "".join(
        f"## Finding {k}\n\n" + sentence.format(a=k, b=k + 1) * 60 + "\n\n"
        for k in range(1, sections + 1)
    )
    listed = "".join(f"- [{s.n}] [{s.title}]({s.url})\n" for s in sources)
    return f"# Heat pumps\n\n{body}## Sources\n\n{listed}"


def _outcome(run: RunRecord, markdown: str, sources: list[Source], claims: CheckSummary) -> Any:
    return RunOutcome(
        run_id=run.id,
        thread=run.thread_key,
        status=RunStatus.SUCCEEDED,
        topic=run.topic,
        depth=3,
        topics=[run.topic],
        report_markdown=markdown,
        sources=sources,
        usage=Usage(),
        seconds=1.0,
        claims=claims,
    )


def _claims() -> CheckSummary:
    """Source 1 supported a claim (its quote kept); source 2's claim was marked unverified
    (its passage must not be shown); source 3's claim was only partly supported."""
    return CheckSummary(
        claims=[
            ClaimSummary(
                text="They move heat [1].",
                cited=[1],
                verdict="supported",
                quote=SUPPORTED,
                quote_source=1,
            ),
            ClaimSummary(
                text="Cold costs efficiency [2].",
                cited=[2],
                verdict="unsupported",
                fixed="unverified",
                quote=UNVERIFIED,
                quote_source=2,
            ),
            ClaimSummary(
                text="Partly [3].",
                cited=[3],
                verdict="partial",
                quote="A passage that only partly agrees.",
                quote_source=3,
            ),
        ]
    )


async def _deliver(store: Store, api: TeamsApi, run: RunRecord, outcome: Any) -> None:
    delivery: ChatDelivery = await TeamsPosters(api, store, None, edit_interval=0.0).for_run(run)
    for part in delivery.report_parts(outcome):
        await delivery.post_report_part(part)
    await delivery.aclose()


def _text_parts(server: FakeTeamsServer, run: RunRecord) -> list[Posted]:
    root = run.thread_key.rsplit(":", 1)[1]
    return [m for m in server.fake.chain(CHANNEL, root) if m.text]


def _citations(message: Posted) -> list[dict[str, Any]]:
    (entity,) = [e for e in message.body["entities"] if e.get("type") == MESSAGE_ENTITY]
    assert entity["@type"] == "Message" and entity["@context"] == "https://schema.org"
    assert entity["additionalType"] == ["AIGeneratedContent"]
    return list(entity.get("citation", []))


def _sent_size(body: dict[str, Any]) -> int:
    """Bytes of the body as httpx sent it (compact JSON, UTF-8)."""
    return len(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())


async def test_a_long_reports_parts_cite_their_sources_with_the_supporting_quote(
    teams_server: FakeTeamsServer, api: TeamsApi, store: Store
) -> None:
    sources = _sources(9)
    run = await _run(store, teams_server, "heat pumps")
    outcome = _outcome(run, _report(sources, sections=8), sources, _claims())
    await _deliver(store, api, run, outcome)
    parts = _text_parts(teams_server, run)
    assert len(parts) >= 2
    by_number = {s.n: s for s in sources}
    abstracts: dict[int, str] = {}
    for part in parts:
        citations = _citations(part)
        cited = list(dict.fromkeys(int(n) for n in MARKER.findall(part.text)))
        # the sources this part cites, each once, in the order it cites them
        assert [c["position"] for c in citations] == cited and cited
        for citation in citations:
            source = by_number[citation["position"]]
            appearance = citation["appearance"]
            assert citation["@type"] == "Claim" and appearance["@type"] == "DigitalDocument"
            assert (appearance["name"], appearance["url"]) == (source.title, source.url)
            assert f"[[{source.n}]](" not in part.text  # the marker Teams matches, no link
            abstracts.setdefault(source.n, appearance["abstract"])
            assert abstracts[source.n] == appearance["abstract"]
    assert set(abstracts) == set(by_number)  # every source cited somewhere carries its own
    assert abstracts[1] == f"“{SUPPORTED}”"
    neutral = "No supporting quote is shown for this source."
    assert all(abstracts[n] == neutral for n in range(2, 10))  # unverified, partial, none
    everything = json.dumps([p.versions for p in parts], ensure_ascii=False)
    assert UNVERIFIED not in everything and "only partly agrees" not in everything
    sends = [c for c in teams_server.fake.calls_to("send") if c.body.get("text")]
    assert len(sends) == len(parts)
    assert all(_sent_size(c.body) < MAX_ACTIVITY_BYTES for c in sends)


async def test_a_chinese_run_gets_chinese_citation_words_and_stays_under_the_limit(
    teams_server: FakeTeamsServer, api: TeamsApi, store: Store
) -> None:
    sources = _sources(6)
    sources[2] = Source(n=3, title="", url="https://s3.example/report")  # no title
    quote = "在零下十五摄氏度的实地试验中，空气源热泵的能效比保持在二以上。" * 6  # > 160
    claims = CheckSummary(
        claims=[
            ClaimSummary(
                text="热泵 [1]。", cited=[1], verdict="supported", quote=quote[:200], quote_source=1
            )
        ]
    )
    run = await _run(store, teams_server, "热泵在寒冷气候中的表现")
    await _deliver(store, api, run, _outcome(run, _report(sources, 5, "zh"), sources, claims))
    parts = _text_parts(teams_server, run)
    assert len(parts) >= 2  # three bytes a character: more parts than the English text
    shown = {c["position"]: c["appearance"] for p in parts for c in _citations(p)}
    first = shown[1]["abstract"]
    assert len(first) == ABSTRACT_CHARS and first.startswith("“在零下") and first.endswith("…”")
    assert shown[2]["abstract"] == "此来源没有可显示的支持引文。"
    assert shown[3]["name"] == "来源 3"
    sends = [c for c in teams_server.fake.calls_to("send") if c.body.get("text")]
    assert all(_sent_size(c.body) < MAX_ACTIVITY_BYTES for c in sends)


async def test_a_part_citing_more_than_teams_shows_carries_twenty_and_links_the_rest(
    teams_server: FakeTeamsServer, api: TeamsApi, store: Store
) -> None:
    sources = _sources(25)
    markdown = "# Survey\n\nEvery study agrees " + " ".join(f"[{s.n}]" for s in sources) + ".\n"
    run = await _run(store, teams_server, "heat pumps")
    await _deliver(store, api, run, _outcome(run, markdown, sources, CheckSummary()))
    (part,) = _text_parts(teams_server, run)
    assert [c["position"] for c in _citations(part)] == list(range(1, MAX_CITATIONS + 1))
    for source in sources[MAX_CITATIONS:]:  # over Teams' count: the link every platform has
        assert f"[[{source.n}]]({source.url})" in part.text
    assert "[[20]](" not in part.text


async def test_the_fake_refuses_what_teams_refuses(
    teams_server: FakeTeamsServer, api: TeamsApi
) -> None:
    """The documented 400s, so a renderer over the limits fails here and not in Teams."""
    service = teams_server.service_url
    base = {
        "type": MESSAGE_ENTITY,
        "@type": "Message",
        "@context": "https://schema.org",
        "@id": "",
    }

    def claim(n: int, **appearance: Any) -> dict[str, Any]:
        shown = {"@type": "DigitalDocument", "name": f"S{n}", "abstract": "a", **appearance}
        return {"@type": "Claim", "position": n, "appearance": shown}

    refused = {
        "more than 20 citations": [{**base, "citation": [claim(n) for n in range(1, 22)]}],
        "Multiple root message entities": [base, base],
        "appearance object is empty": [{**base, "citation": [{"@type": "Claim", "position": 1}]}],
        "citation entity with ID: 0": [{**base, "citation": [claim(1, name="n" * 81)]}],
    }
    for words, entities in refused.items():
        activity = {"type": "message", "text": "x [1]", "entities": entities}
        with pytest.raises(TeamsError) as raised:
            await api.send(service, CHANNEL, activity)
        assert raised.value.status == 400 and words in str(raised.value)
    fine = {**base, "citation": [claim(n) for n in range(1, 21)]}
    sent = await api.send(service, CHANNEL, {"type": "message", "text": "x", "entities": [fine]})
    assert sent


def test_titles_and_quotes_are_plain_words_within_teams_limits() -> None:
    """A title and a quote are the sources' words: no mention, link or web address reaches
    the pop-up, and each is cut to Teams' limit."""
    hostile = (
        "<at>Bob</at> @channel see https://evil.example/x and [here](https://evil.example/y) "
        + "words " * 40
    )
    source = Source(n=1, title=hostile, url="https://a.example/1")
    claims = CheckSummary(
        claims=[
            ClaimSummary(
                text="x [1]", cited=[1], verdict="supported", quote=hostile, quote_source=1
            )
        ]
    )
    from core.claims.quotes import source_quotes

    (part,) = report_parts("# T\n\nA claim [1].\n", [source], (), "en", source_quotes(claims))
    ((entity,),) = [part.activity["entities"]]
    (citation,) = entity["citation"]
    appearance = citation["appearance"]
    for field in ("name", "abstract"):
        value = appearance[field]
        assert "evil.example" not in value and "<at>" not in value and "](" not in value
        assert f"@{WORD_JOINER}channel" in value and "@channel" not in value
    assert len(appearance["name"]) <= NAME_CHARS and appearance["name"].endswith("…")
    assert len(appearance["abstract"]) <= ABSTRACT_CHARS
    assert appearance["url"] == "https://a.example/1"
