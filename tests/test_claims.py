"""A report's claims and the lexical pass that settles the plain ones (``core.claims``)."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest

from core.claims import Claim, Evidence, claims_of, plainly_supported
from core.claims.check import Fix, check_claims
from core.claims.verifier import Verdict, batches, verdicts
from core.llm import ChatModel, LLMInvalidJSON
from core.models import Usage
from tests.fakes import FakeLLMServer, Reply
from tests.test_engine import user_prompt

REPORT = """# Heat pumps in cold climates

*Written 2 December 2026.*

## Executive summary

Heat pumps cut household emissions by 40% in 2025 [1]. They work in cold climates, e.g. in
Norway.[2] This sentence cites nothing.

## Main findings

- Installed costs fell to 1,200 dollars per kW [3][1].
- An item without a citation.
1. A numbered item with one [2]

| Country | Share |
|---|---|
| Norway | 60% [2] |

```
Code with [4] is no claim.
```

> A quote that cites [1] is one.

热泵在寒冷地区也能工作[2]。成本在下降[3]！没有引用的句子。

## References

- [1] The agency's report [1].
"""


def test_each_cited_sentence_item_and_row_is_a_claim_and_nothing_else() -> None:
    claims = claims_of(REPORT)
    assert [(c.statement, c.cites) for c in claims] == [
        ("Heat pumps cut household emissions by 40% in 2025.", (1,)),
        ("They work in cold climates, e.g. in Norway.", (2,)),
        ("Installed costs fell to 1,200 dollars per kW.", (3, 1)),
        ("A numbered item with one", (2,)),
        ("Norway 60%", (2,)),
        ("A quote that cites is one.", (1,)),
        ("热泵在寒冷地区也能工作。", (2,)),
        ("成本在下降！", (3,)),
    ]
    assert [c.index for c in claims] == list(range(len(claims)))
    for claim in claims:  # each knows where it stands, to be rewritten in place
        assert REPORT[claim.start : claim.end] == claim.text


@pytest.mark.parametrize(
    ("line", "sentences"),
    [
        ("Output rose 3.5% in Q1 [1]. It fell later [2].", 2),
        ("See Fig. 2 of the report [1].", 1),
        ("The U.S. market grew [1]. Europe's shrank [2].", 2),
        ("Dr. Smith said so [1]. Others agreed [2]!", 2),
        ("Did it work? Yes [1].", 1),  # the question cites nothing: no claim
        ("价格上涨了3.5%[1]。需求下降[2]。", 2),
    ],
)
def test_sentences_end_where_a_reader_would_end_them(line: str, sentences: int) -> None:
    assert len(claims_of(line)) == sentences


def test_a_line_of_citations_alone_is_no_claim() -> None:
    assert claims_of("[1][2]\n\n- [3]\n") == []


PASSAGES = (
    "Heat pumps cut household emissions by 40% in 2025, the agency said.",
    "Installed costs fell to 1200 dollars per kW over the decade.",
    "“The cold is no obstacle any more,” the engineer said in Oslo.",
)
SOURCE = Evidence(1, "The agency's report", "https://example.org/a", PASSAGES)
CHINESE = Evidence(
    2, "报告", "https://example.cn/b", ("热泵在寒冷地区也能高效工作，挪威的普及率达到60%。",)
)


@pytest.mark.parametrize(
    ("statement", "supported"),
    [
        ("Heat pumps cut emissions by 40% in 2025.", True),
        ("Installed costs fell to 1,200 dollars per kW.", True),  # thousands separator
        ("An engineer said “The cold is no obstacle any more”.", True),
        ("Heat pumps cut emissions by 45% in 2025.", False),  # a number the source lacks
        ("Heat pumps cut emissions by 40% in 2024.", False),
        ("Heat pumps are loved by everyone in Norway.", False),  # words the source lacks
        ("The engineer said “the cold is a big obstacle”.", False),  # a misquote
    ],
)
def test_the_lexical_pass_settles_only_what_a_passage_plainly_says(
    statement: str, supported: bool
) -> None:
    assert plainly_supported(statement, [SOURCE]) is supported


@pytest.mark.parametrize(
    ("statement", "supported"),
    [
        ("热泵在寒冷地区也能工作。", True),
        ("挪威的普及率达到60%。", True),
        ("挪威的普及率达到70%。", False),
        ("电动汽车的销量在下降。", False),
    ],
)
def test_chinese_claims_are_compared_by_character_pairs(statement: str, supported: bool) -> None:
    assert plainly_supported(statement, [CHINESE]) is supported


#: One passage of two findings, as pages give them: a writer may copy one, or mix them.
TWO_FINDINGS = Evidence(
    4,
    "Storage survey",
    "https://example.org/d",
    (
        "Northwind Energy reported that installations of heat pumps in Ohio rose 12% in 2019. "
        "Meridian Labs plans to build 40 heat pump sites in Texas by 2024.",
    ),
)


@pytest.mark.parametrize(
    ("statement", "supported"),
    [
        (
            "Northwind Energy reported that installations of heat pumps in Ohio rose 12% in 2019.",
            True,
        ),
        ("Meridian Labs plans to build 40 heat pump sites in Texas by 2024.", True),
        # The words of the first finding with the second's number: the passage holds every
        # word and number, no sentence of it says this (bench/claims.py's "swapped" fault).
        (
            "Northwind Energy reported that installations of heat pumps in Ohio rose 40% in 2019.",
            False,
        ),
        ("Meridian Labs plans to build 12 heat pump sites in Texas by 2024.", False),
    ],
)
def test_a_claim_must_be_said_by_one_sentence_of_a_passage(statement: str, supported: bool) -> None:
    assert plainly_supported(statement, [TWO_FINDINGS]) is supported


def test_a_claim_is_checked_against_the_sources_it_cites_only() -> None:
    assert plainly_supported("Heat pumps cut emissions by 40% in 2025.", [CHINESE]) is False
    assert plainly_supported("Heat pumps cut emissions by 40% in 2025.", [CHINESE, SOURCE])
    assert plainly_supported("Heat pumps cut emissions by 40% in 2025.", []) is False
    empty = Evidence(3, "No text", "https://example.org/c", ())
    assert plainly_supported("Heat pumps cut emissions by 40% in 2025.", [empty]) is False


# -- the verifier model ------------------------------------------------------------------------

KEY = "fake-key"


@pytest.fixture
async def verifier(llm_server: FakeLLMServer) -> AsyncIterator[ChatModel]:
    model = ChatModel(
        model="verifier-model", api_key=KEY, base_url=llm_server.base_url, max_retries=1
    )
    try:
        yield model
    finally:
        await model.aclose()


def report_with(*sentences: str) -> list[Claim]:
    return claims_of(" ".join(sentences))


async def test_the_verifier_is_asked_as_the_contract_says(
    verifier: ChatModel, llm_server: FakeLLMServer
) -> None:
    """Claims as ``Claim <i>: <text>`` and ``Cited: [n]``, then each cited source as
    ``[n] <title> — <url>`` with its passages, fenced as untrusted data."""
    claims = report_with("Heat pumps cut emissions by 45% in 2025 [1].", "热泵很受欢迎[2]。")
    evidence = {1: SOURCE, 2: CHINESE}
    found = await verdicts(verifier, claims, evidence, Usage())
    assert {i: v.verdict for i, v in found.items()} == {0: Verdict.SUPPORTED, 1: Verdict.SUPPORTED}
    (request,) = llm_server.fake.requests_for("verifier")
    prompt = user_prompt(request.body)
    assert "Claim 1: Heat pumps cut emissions by 45% in 2025.\nCited: [1]" in prompt
    assert "Claim 2: 热泵很受欢迎。\nCited: [2]" in prompt
    assert "[1] The agency's report — https://example.org/a\n    > " in prompt
    assert "[2] 报告 — https://example.cn/b\n    > 热泵在寒冷地区也能高效工作" in prompt
    fence = re.search(r"<<<untrusted-(\w+)>>>", prompt)
    assert fence is not None and prompt.count(f"<<<end-untrusted-{fence.group(1)}>>>") == 2
    assert request.body.get("response_format")  # one JSON object, as the planner's


async def test_verdicts_on_claims_or_sources_not_asked_about_are_ignored(
    verifier: ChatModel, llm_server: FakeLLMServer
) -> None:
    claims = report_with("Costs fell to 900 dollars per kW [1].", "The cold is an obstacle [1].")
    answer = {
        "verdicts": [
            {"claim": 1, "verdict": "Unsupported", "source": 7},  # 7 was not shown
            {"claim": 2, "verdict": "partial"},
            {"claim": 9, "verdict": "supported"},  # no such claim
            {"claim": 2, "verdict": "maybe"},  # not a verdict: dropped, not the answer
            "nonsense",
        ]
    }
    llm_server.fake.script("verifier", Reply(json.dumps(answer)))
    found = await verdicts(verifier, claims, {1: SOURCE}, Usage())
    assert {i: (v.verdict, v.source) for i, v in found.items()} == {
        0: (Verdict.UNSUPPORTED, None),
        1: (Verdict.PARTIAL, None),
    }


async def test_a_verifier_that_answers_garbage_twice_raises_for_the_caller(
    verifier: ChatModel, llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script("verifier", Reply("I think they are fine."), Reply("{not json"))
    with pytest.raises(LLMInvalidJSON):
        await verdicts(verifier, report_with("Costs fell [1]."), {1: SOURCE}, Usage())
    assert len(llm_server.fake.requests_for("verifier")) == 2  # asked once more, then given up


def test_claims_whose_sources_do_not_fit_one_request_are_asked_in_several() -> None:
    long = Evidence(
        1, "Long", "https://example.org/l", tuple(f"Passage {i} " * 600 for i in range(40))
    )
    claims = report_with(*(f"Passage {i} says something [1]." for i in range(40)))
    groups = batches(claims, {1: long})
    assert len(groups) > 1
    assert [c.index for batch in groups for c in batch.claims] == list(range(40))
    one = batches(report_with("Heat pumps cut emissions [1].", "Costs fell [1]."), {1: SOURCE})
    assert len(one) == 1 and list(one[0].sources) == [1]  # one call, the source shown once


# -- the check and its fixes ---------------------------------------------------------------------

OTHER = Evidence(
    2,
    "The engineers' blog",
    "https://example.org/b",
    ("Ground-source units paid back in 7 years.",),
)
CHECKED = (
    "## Findings\n\n"
    "Heat pumps cut household emissions by 40% in 2025 [1]. "  # plainly said by [1]
    "Ground-source units paid back in 7 years [1]. "  # said by [2], cited as [1]
    "Installed costs fell to 300 dollars per kW [1].\n"  # said by nobody
    "- Engineers in Oslo say the cold is no longer a problem [1]\n"
)


async def test_a_miscited_claim_is_recited_and_an_invented_one_marked(
    verifier: ChatModel, llm_server: FakeLLMServer
) -> None:
    answer = {
        "verdicts": [
            {"claim": 2, "verdict": "unsupported", "source": 2},
            {"claim": 3, "verdict": "unsupported", "source": None},
            {"claim": 4, "verdict": "partial", "source": None},
        ]
    }
    llm_server.fake.script("verifier", Reply(json.dumps(answer)))
    check = await check_claims(CHECKED, {1: SOURCE, 2: OTHER}, verifier, Usage(), "en")
    assert check.markdown == (
        "## Findings\n\n"
        "Heat pumps cut household emissions by 40% in 2025 [1]. "
        "Ground-source units paid back in 7 years [2]. "
        "Installed costs fell to 300 dollars per kW *(not verified)*.\n"
        "- Engineers in Oslo say the cold is no longer a problem [1]\n"
    )
    assert [(c.verdict, c.lexical, c.fix, c.source) for c in check.claims] == [
        (Verdict.SUPPORTED, True, None, None),
        (Verdict.UNSUPPORTED, False, Fix.RECITED, 2),
        (Verdict.UNSUPPORTED, False, Fix.UNVERIFIED, None),
        (Verdict.PARTIAL, False, None, None),
    ]
    assert (check.supported, check.fixed, check.partial) == (1, 2, False)
    (request,) = llm_server.fake.requests_for("verifier")  # the plain claim was not asked
    prompt = user_prompt(request.body)
    assert "Claim 1:" not in prompt and "Claim 2:" in prompt
    # the source that says claim 2 was shown, though no claim cites it
    assert "[2] The engineers' blog — https://example.org/b\n    > Ground-source" in prompt


async def test_a_report_whose_claims_are_all_plain_asks_no_model(
    verifier: ChatModel, llm_server: FakeLLMServer
) -> None:
    plain = "Heat pumps cut emissions by 40% in 2025 [1]. 热泵在寒冷地区也能工作[2]。"
    check = await check_claims(plain, {1: SOURCE, 2: CHINESE}, verifier, Usage(), "zh")
    assert check.markdown == plain and check.supported == 2 and not check.partial
    assert llm_server.fake.requests_for("verifier") == []


async def test_a_verifier_that_answers_garbage_leaves_the_lexical_verdicts(
    verifier: ChatModel, llm_server: FakeLLMServer
) -> None:
    llm_server.fake.script("verifier", Reply("no"), Reply("still no"))
    check = await check_claims(CHECKED, {1: SOURCE, 2: OTHER}, verifier, Usage(), "en")
    assert check.markdown == CHECKED and check.partial
    assert [c.verdict for c in check.claims] == [Verdict.SUPPORTED, None, None, None]


async def test_a_chinese_claim_no_source_supports_is_marked_in_chinese(
    verifier: ChatModel, llm_server: FakeLLMServer
) -> None:
    answer = {"verdicts": [{"claim": 1, "verdict": "unsupported", "source": None}]}
    llm_server.fake.script("verifier", Reply(json.dumps(answer)))
    check = await check_claims("电动汽车的销量在下降[2]。", {2: CHINESE}, verifier, Usage(), "zh")
    assert check.markdown == "电动汽车的销量在下降*（未经核实）*。"


REVISED = (
    "- Ground-source units paid back in 5 years [2]\n"  # revised from [2]
    "- Heat pumps doubled in Oslo [1]\n"  # dropped
    "- Costs fell to 300 dollars per kW [1]\n"  # the revision invents again
    "- Costs will fall again [1]\n"  # the revision cites a source it was not shown
)


async def test_failing_claims_are_revised_from_their_sources_or_dropped_or_marked(
    verifier: ChatModel, llm_server: FakeLLMServer
) -> None:
    unsupported = [{"claim": i, "verdict": "unsupported", "source": None} for i in (1, 2, 3, 4)]
    llm_server.fake.script("verifier", Reply(json.dumps({"verdicts": unsupported})))
    revised = [
        {"claim": 1, "text": "Ground-source units paid back in 7 years [2]"},
        {"claim": 2, "text": None},
        {"claim": 3, "text": "Costs fell to 250 dollars per kW [1]"},
        {"claim": 4, "text": "Costs will fall again [9]"},
    ]
    llm_server.fake.script("reviser", Reply(json.dumps({"revisions": revised})))
    check = await check_claims(REVISED, {1: SOURCE, 2: OTHER}, verifier, Usage(), "en")
    assert check.markdown == (
        "- Ground-source units paid back in 7 years [2]\n"
        "- Costs fell to 300 dollars per kW *(not verified)*\n"
        "- Costs will fall again *(not verified)*\n"
    )
    assert [c.fix for c in check.claims] == [
        Fix.REVISED,
        Fix.DROPPED,
        Fix.UNVERIFIED,
        Fix.UNVERIFIED,
    ]
    assert check.fixed == 4 and check.supported == 0
    assert len(llm_server.fake.requests_for("reviser")) == 1  # one call for all four


async def test_a_reviser_that_fails_leaves_the_claims_marked(
    verifier: ChatModel, llm_server: FakeLLMServer
) -> None:
    answer = {"verdicts": [{"claim": 1, "verdict": "unsupported", "source": None}]}
    llm_server.fake.script("verifier", Reply(json.dumps(answer)))
    llm_server.fake.script("reviser", Reply("nope"), Reply("nope"))
    check = await check_claims(
        "Heat pumps doubled in Oslo [1].", {1: SOURCE}, verifier, Usage(), "en"
    )
    assert check.markdown == "Heat pumps doubled in Oslo *(not verified)*."
    assert [c.fix for c in check.claims] == [Fix.UNVERIFIED]
