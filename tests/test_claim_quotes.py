"""The quote each supported claim keeps of its source (issue 56, item 3): what the check keeps
(``core.claims.check``, ``core.claims.excerpt``), how the run keeps it (renumbered, stored,
``fathom research --json``) and what ``core.claims.quotes.source_quotes`` shows beside each
source.

A quote is the source's own text (spacing collapsed, control characters removed), at most
200 characters, and only for a claim found supported, re-cited or revised; the verifier model
never writes one and no call is added for it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from core.claims import Evidence
from core.claims.check import Fix, check_claims
from core.claims.evidence import EvidenceKind
from core.claims.excerpt import ELLIPSIS, plain, quote_of, verbatim
from core.claims.quotes import QUOTES_PER_SOURCE, source_quotes
from core.claims.summary import QUOTE_CHARS, CheckSummary, ClaimSummary
from core.claims.verifier import Verdict
from core.llm import ChatModel
from core.models import Usage
from core.research.outcome import stored_claims
from core.values import RunStatus
from storage import Store
from tests.cli import fathom
from tests.fakes import FakeLLMServer, FakeSearchServer, Reply
from tests.fakes.search import slug
from tests.runs import claim as claim_run
from tests.runs import new_run
from tests.test_citation_forms import QUERY, TOPIC
from tests.test_claims import (  # noqa: F401
    CHECKED,
    INJECTED,
    OTHER,
    PARAPHRASE,
    SNIPPET_ONLY,
    SOURCE,
    verifier,
)
from tests.test_claims_in_runs import mixed  # noqa: F401

#: A page passage whose sentence that says the claim is longer than a quote may be.
LONG = (
    "In its annual review of the heating sector, published after a year of consultations "
    "with installers, utilities and households in twelve countries, the agency found that "
    "heat pumps cut household emissions by 40% in 2025 while running costs stayed level "
    "for most of the homes it surveyed across the northern and central regions of Europe. "
    "A second sentence follows."
)
REVIEW = Evidence(1, "Annual review", "https://example.org/review", (LONG,))


def pieces(quote: str) -> list[str]:
    return [p.strip() for p in quote.split(ELLIPSIS) if p.strip()]


def in_text(quote: str, *texts: str) -> bool:
    """Each piece of ``quote`` stands in one of ``texts`` (spacing collapsed): verbatim."""
    plain_texts = [" ".join(t.split()) for t in texts]
    return bool(pieces(quote)) and all(any(p in t for t in plain_texts) for p in pieces(quote))


# -- what the check keeps ----------------------------------------------------------------------


async def test_a_plainly_supported_claim_keeps_its_sentence_cut_around_the_claim(
    verifier: ChatModel,  # noqa: F811
    llm_server: FakeLLMServer,
) -> None:
    """The lexical pass found the claim in one sentence of 250 characters: the quote is the
    part of it around the claim's words, cut between words, marked "…" at both ends, within
    200 characters, and asks no model."""
    check = await check_claims(
        "Heat pumps cut household emissions by 40% in 2025 [1].",
        {1: REVIEW},
        verifier,
        Usage(),
        "en",
    )
    (claim,) = check.summary().claims
    assert claim.verdict == "supported" and claim.quote_source == 1
    quote = claim.quote
    assert quote is not None and len(quote) <= QUOTE_CHARS
    assert quote.startswith(ELLIPSIS) and quote.endswith(ELLIPSIS)
    assert "heat pumps cut household emissions by 40% in 2025" in quote
    assert in_text(quote, LONG) and "A second sentence" not in quote
    inner = quote.strip(ELLIPSIS)
    assert f" {inner} " in f" {LONG} "  # cut between words, not inside one
    assert llm_server.fake.requests_for("verifier") == []


async def test_a_short_sentence_is_kept_whole_its_spacing_and_control_characters_removed(
    verifier: ChatModel,  # noqa: F811
) -> None:
    source = Evidence(
        1,
        "Report",
        "https://example.org/r",
        ("Intro.\n\nHeat  pumps\tcut\u202e emissions\x00 by 40% in 2025.\n  Next one.",),
    )
    check = await check_claims(
        "Heat pumps cut emissions by 40% in 2025 [1].", {1: source}, verifier, Usage(), "en"
    )
    (claim,) = check.summary().claims
    assert claim.quote == "Heat pumps cut emissions by 40% in 2025."
    assert claim.quote_source == 1


async def test_a_claim_the_verifier_supports_keeps_the_sentence_shown_that_holds_it(
    verifier: ChatModel,  # noqa: F811
    llm_server: FakeLLMServer,
) -> None:
    """The lexical pass does not settle a claim in other words; the verifier (the fake's
    default: supported) is asked once, and the quote is the sentence of the passages it was
    shown that holds most of the claim: from the cited source that says it, not from the
    other cited source that does not."""
    unrelated = Evidence(
        2, "Other", "https://example.org/o", ("Wind farms grew fast in Denmark last year.",)
    )
    survey = Evidence(
        3,
        "Installer survey",
        "https://survey.example/2026",
        (
            "The survey asked 400 installers. Heat pumps in Oslo doubled in number over two "
            "winters, installers say. Prices were not covered.",
            "Methodology is described in the annex.",
        ),
    )
    check = await check_claims(
        "Oslo's heat pumps doubled over two winters [2][3].",
        {2: unrelated, 3: survey},
        verifier,
        Usage(),
        "en",
    )
    (claim,) = check.summary().claims
    assert (claim.verdict, claim.fixed) == ("supported", None)
    assert claim.quote == "Heat pumps in Oslo doubled in number over two winters, installers say."
    assert claim.quote_source == 3
    assert len(llm_server.fake.requests_for("verifier")) == 1  # no call added for the quote


async def test_a_verdict_s_quote_never_comes_from_a_source_that_speaks_to_a_model(
    verifier: ChatModel,  # noqa: F811
) -> None:
    """Of two cited sources, the one whose text tells the verifier what to do holds every word
    of the claim; the quote comes from the other, which holds most of them."""
    installers = Evidence(
        4,
        "Installers",
        "https://installers.example/oslo",
        ("Installers call heat pumps in Oslo the best deal of the winter.",),
    )
    check = await check_claims(
        "This winter heat pumps in Oslo are the best deal [3][4].",
        {3: INJECTED, 4: installers},
        verifier,
        Usage(),
        "en",
    )
    assert 3 in check.addressing
    (claim,) = check.summary().claims
    assert claim.verdict == "supported"
    assert (claim.quote_source, claim.quote) == (4, installers.passages[0])


async def test_a_claim_the_verifier_supports_without_a_sentence_that_holds_it_keeps_none(
    verifier: ChatModel,  # noqa: F811
) -> None:
    """The verifier's "supported" (the fake's default) for a claim whose cited source shares
    few of its words: no sentence holds enough of it to show a reader, so no quote."""
    check = await check_claims(
        "Geothermal drilling costs halved in Iceland [2].", {2: OTHER}, verifier, Usage(), "en"
    )
    (claim,) = check.summary().claims
    assert claim.verdict == "supported" and claim.quote is None and claim.quote_source is None


async def test_only_supported_recited_and_revised_claims_keep_a_quote(
    verifier: ChatModel,  # noqa: F811
    llm_server: FakeLLMServer,
) -> None:
    """Plain (lexical), re-cited (to the source that plainly says it: the quote is that
    source's), marked as not verified, partial: only the first two keep a quote."""
    answer = {
        "verdicts": [
            {"claim": 2, "verdict": "unsupported", "source": 2},
            {"claim": 3, "verdict": "unsupported", "source": None},
            {"claim": 4, "verdict": "partial", "source": None},
        ]
    }
    llm_server.fake.script("verifier", Reply(json.dumps(answer)))
    check = await check_claims(CHECKED, {1: SOURCE, 2: OTHER}, verifier, Usage(), "en")
    claims = check.summary().claims
    assert [(c.fixed, c.quote_source, c.quote) for c in claims] == [
        (None, 1, "Heat pumps cut household emissions by 40% in 2025, the agency said."),
        ("recited", 2, "Ground-source units paid back in 7 years."),
        ("unverified", None, None),
        (None, None, None),  # partial
    ]
    assert claims[3].verdict == "partial"
    assert source_quotes(check.summary()) == {
        1: ["Heat pumps cut household emissions by 40% in 2025, the agency said."],
        2: ["Ground-source units paid back in 7 years."],
    }


async def test_a_claim_re_cited_on_a_second_verdict_quotes_the_source_it_moved_to(
    verifier: ChatModel,  # noqa: F811
    llm_server: FakeLLMServer,
) -> None:
    answer = {"verdicts": [{"claim": 1, "verdict": "unsupported", "source": 4}]}
    llm_server.fake.script("verifier", Reply(json.dumps(answer)))  # the second: supported
    check = await check_claims(
        "Heat pumps doubled in Oslo [1].", {1: SOURCE, 4: PARAPHRASE}, verifier, Usage(), "en"
    )
    (claim,) = check.summary().claims
    assert (claim.fixed, claim.source, claim.quote_source) == ("recited", 4, 4)
    assert claim.quote == PARAPHRASE.passages[0]
    assert len(llm_server.fake.requests_for("verifier")) == 2  # the check's own two, no more


async def test_a_revised_claim_quotes_the_sentence_that_says_its_new_text_and_a_dropped_none(
    verifier: ChatModel,  # noqa: F811
    llm_server: FakeLLMServer,
) -> None:
    unsupported = [{"claim": i, "verdict": "unsupported", "source": None} for i in (1, 2)]
    llm_server.fake.script("verifier", Reply(json.dumps({"verdicts": unsupported})))
    revised = [
        {"claim": 1, "text": "Ground-source units paid back in 7 years [2]"},
        {"claim": 2, "text": None},
    ]
    llm_server.fake.script("reviser", Reply(json.dumps({"revisions": revised})))
    check = await check_claims(
        "- Ground-source units paid back in 5 years [2]\n- Heat pumps doubled in Oslo [1]\n",
        {1: SOURCE, 2: OTHER},
        verifier,
        Usage(),
        "en",
    )
    assert [c.fix for c in check.claims] == [Fix.REVISED, Fix.DROPPED]
    revised_claim, dropped = check.summary().claims
    assert (revised_claim.quote, revised_claim.quote_source) == (OTHER.passages[0], 2)
    assert (dropped.quote, dropped.quote_source) == (None, None)
    assert source_quotes(check.summary()) == {2: [OTHER.passages[0]]}


async def test_a_snippet_quotes_itself_when_it_plainly_holds_the_claim_and_else_nothing(
    verifier: ChatModel,  # noqa: F811
) -> None:
    """A snippet that plainly holds the claim is its quote; the verifier's "supported" on a
    claim only a snippet backs is "partial", with no quote."""
    check = await check_claims(
        "Heat pumps are getting popular across Norway [5]. Heat pumps doubled in Oslo [5].",
        {5: SNIPPET_ONLY},
        verifier,
        Usage(),
        "en",
    )
    plain_claim, partial = check.summary().claims
    assert plain_claim.verdict == "supported" and plain_claim.quote_source == 5
    assert plain_claim.quote == SNIPPET_ONLY.passages[0]
    assert SNIPPET_ONLY.kind is EvidenceKind.SNIPPET
    assert (partial.verdict, partial.quote) == (Verdict.PARTIAL.value, None)


async def test_a_chinese_source_gives_a_chinese_quote_cut_at_200_characters(
    verifier: ChatModel,  # noqa: F811
) -> None:
    """A Chinese sentence of more than 200 characters is cut between characters around the
    claim, "…" marking the cuts, at most 200 characters in all."""
    before = (
        "根据国家能源局发布的年度报告"
        + "，在北方多个省份开展的调查显示居民取暖方式正在发生变化" * 4
    )
    after = "，同时运行成本基本保持稳定" * 12
    sentence = f"{before}，热泵在寒冷地区也能高效工作{after}。"
    assert len(sentence) > QUOTE_CHARS
    source = Evidence(2, "报告", "https://example.cn/b", (sentence + "另一句话。",))
    check = await check_claims(
        "热泵在寒冷地区也能高效工作[2]。", {2: source}, verifier, Usage(), "zh"
    )
    (claim,) = check.summary().claims
    quote = claim.quote
    assert quote is not None and claim.quote_source == 2
    assert len(quote) == QUOTE_CHARS  # every place between two characters is a word boundary
    assert quote.startswith(ELLIPSIS) and quote.endswith(ELLIPSIS)
    assert "热泵在寒冷地区也能高效工作" in quote and in_text(quote, sentence)
    assert re.fullmatch(r"…[\u4e00-\u9fff，]+…", quote)


async def test_platform_markup_in_a_source_stays_text_in_its_quote(
    verifier: ChatModel,  # noqa: F811
) -> None:
    """Mentions, links and emphasis in a source's text are its words: the quote keeps them
    as written (rendering them inert is each platform's job), and adds none."""
    hostile = Evidence(
        1,
        "Forum post",
        "https://forum.example/t/1",
        ("<@U123> @here heat pumps cut emissions by 40% in 2025, [x](http://evil) *bold*.",),
    )
    check = await check_claims(
        "Heat pumps cut emissions by 40% in 2025 [1].", {1: hostile}, verifier, Usage(), "en"
    )
    (claim,) = check.summary().claims
    assert claim.quote == hostile.passages[0]
    for markup in ("<@U123>", "@here", "[x](http://evil)", "*bold*"):
        assert markup in claim.quote


@pytest.mark.parametrize(
    "sentence",
    [
        "word " * 80,
        "x" * 500,  # one "word" longer than a quote: cut inside it
        "数" * 300,
        "Heat pumps " + "a" * 300 + " cut emissions.",
        "短句。",
        "",
    ],
)
def test_a_quote_is_never_longer_than_200_characters_and_always_verbatim(sentence: str) -> None:
    quote = quote_of("heat pumps cut emissions", sentence)
    assert len(quote) <= QUOTE_CHARS
    if plain(sentence):
        assert verbatim(quote, [sentence])
    else:
        assert quote == ""


def test_a_quote_not_in_the_source_is_not_verbatim() -> None:
    assert not verbatim("Heat pumps cut emissions by 45%.", [SOURCE.passages[0]])
    assert not verbatim(f"{ELLIPSIS}{ELLIPSIS}", [SOURCE.passages[0]])
    assert verbatim(f"{ELLIPSIS}cut household emissions{ELLIPSIS}", [SOURCE.passages[0]])


# -- what the run keeps and shows --------------------------------------------------------------


def _summary(*claims: dict[str, Any]) -> CheckSummary:
    return CheckSummary(claims=[ClaimSummary.model_validate({"text": "x", **c}) for c in claims])


def test_renumbering_moves_the_quote_with_its_source_and_drops_one_from_a_source_not_listed() -> (
    None
):
    check = _summary(
        {"cited": [3], "verdict": "supported", "quote": "q3", "quote_source": 3},
        {
            "cited": [1],
            "verdict": "unsupported",
            "fixed": "recited",
            "source": 5,
            "quote": "q5",
            "quote_source": 5,
        },
        {"cited": [2], "verdict": "supported", "quote": "gone", "quote_source": 2},
        {"cited": [2], "verdict": "partial"},
    )
    renumbered = check.renumbered({3: 1, 5: 2, 1: 3})
    assert [(c.cited, c.quote, c.quote_source) for c in renumbered.claims] == [
        ([1], "q3", 1),
        ([3], "q5", 2),
        ([], None, None),  # its source is not in the report's list
        ([], None, None),
    ]
    assert source_quotes(renumbered) == {1: ["q3"], 2: ["q5"]}


def test_source_quotes_shows_at_most_two_short_quotes_per_source_whatever_is_stored() -> None:
    """Whatever a stored check holds (long quotes, many claims per source, a revised and a
    re-cited one, a dropped one), each source shows at most two quotes of at most 200
    characters; a dropped or unverified claim's quote is never shown."""
    claims = [
        {"verdict": "supported", "quote": f"quote {i} " + "long " * 60, "quote_source": i % 3}
        for i in range(12)
    ]
    claims += [
        {"verdict": "unsupported", "fixed": "revised", "quote": "revised", "quote_source": 7},
        {"verdict": "contradicted", "fixed": "recited", "quote": "recited", "quote_source": 7},
        {"verdict": "unsupported", "fixed": "dropped", "quote": "dropped", "quote_source": 8},
        {"verdict": "unsupported", "fixed": "unverified", "quote": "marked", "quote_source": 8},
        {"verdict": "contradicted", "quote": "contradicted", "quote_source": 8},
    ]
    shown = source_quotes(_summary(*claims))
    assert set(shown) == {0, 1, 2, 7}
    assert shown[7] == ["revised", "recited"]
    for quotes in shown.values():
        assert 1 <= len(quotes) <= QUOTES_PER_SOURCE
        assert all(0 < len(q) <= QUOTE_CHARS for q in quotes)


async def test_a_check_stored_before_quotes_loads_without_them(store: Store) -> None:
    """A run recorded by a release before issue 56 (its ``claim_check`` without ``quote`` or
    ``quote_source``) reads back with no quotes, and shows none."""
    run, _ = await new_run(store)
    held = await claim_run(store, run.id)
    old = {
        "claims": [
            {
                "text": "Heat pumps work [1].",
                "cited": [1],
                "verdict": "supported",
                "source": None,
                "fixed": None,
            }
        ],
        "partial": False,
        "uncited": 0,
        "reasons": [],
    }
    await store.claims.finish_run(
        held,
        status=RunStatus.SUCCEEDED,
        report_markdown="# r",
        sources=[],
        error=None,
        usage={},
        notes=[],
        claim_check=old,
    )
    stored = await store.runs.get_run(run.id)
    assert stored is not None
    check = stored_claims(stored)
    assert check is not None and check.supported == 1
    (claim,) = check.claims
    assert (claim.quote, claim.quote_source) == (None, None)
    assert source_quotes(check) == {}


def test_research_json_gives_each_claim_its_supporting_quote(
    mixed: FakeLLMServer,  # noqa: F811
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """``fathom research --json``: each claim carries ``quote`` and ``quote_source`` (null
    for the claim marked as not verified); a quote is its source's own text, and
    ``quote_source`` is a source the report lists."""
    result = fathom("research", TOPIC, "--depth", "1", "--json", env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    claims: list[dict[str, Any]] = data["claims"]
    listed = {s["n"] for s in data["sources"]}
    assert [(c["fixed"], c["quote_source"]) for c in claims] == [
        (None, 1),
        ("recited", 2),
        ("unverified", None),
        (None, 3),
    ]
    for claim in claims:
        if claim["quote"] is None:
            continue
        assert claim["quote_source"] in listed and len(claim["quote"]) <= QUOTE_CHARS
        # the writer copied each supported claim from its source: its quote holds it
        assert claim["text"].rstrip(".") in claim["quote"]
    assert claims[2]["quote"] is None


def test_a_page_s_markup_reaches_json_as_text_in_the_quote(
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """A page whose sentence holds a mention, ``@here``, a Markdown link and emphasis: the
    claim copied from it keeps the sentence as the page reader left it (tags and link targets
    dropped) as its quote, ``@here`` and ``*bold*`` as plain text (``--json`` is data; the
    platforms render quotes inert), and no address the page did not show as text."""
    sentence = (
        "&lt;@U123&gt; @here: heat pumps cut household emissions by 40% in 2025, see "
        "[x](http://evil) and *bold*."
    )
    filler = "Filler text about other things. " * 20
    body = f"<html><body><article><p>{sentence}</p><p>{filler}</p></article></body></html>"
    search_server.fake.script_page(f"/pages/{slug(QUERY)}/1", body)
    llm_server.fake.script(
        "writer",
        Reply(
            "# Heat pumps\n\n## Main findings\n\n"
            "- Heat pumps cut household emissions by 40% in 2025 [1]\n"
        ),
    )
    result = fathom("research", TOPIC, "--depth", "1", "--json", env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (claim,) = json.loads(result.stdout)["claims"]
    assert claim["verdict"] == "supported" and claim["quote_source"] == 1
    assert claim["quote"] == (
        "@U123 @here: heat pumps cut household emissions by 40% in 2025, see x and *bold*."
    )
