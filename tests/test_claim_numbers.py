"""Numbers that agree (issue 52, item 7): the claims of ``--json`` (and of the stored run) cite
by the numbers of the same output's ``sources``, and the report's uncited factual sentences
are counted (``uncited_claims``).

The runs are real (``fathom research --json``, or the executor and a second replica, against
the fakes); the writer is scripted, the fake verifier judges by what the sources say
(``FakeLLM.citing = "mixed"``). The sources are the fake search's results for the fake
planner's first topic: the page of result ``i`` says ``adoption rose {10+i}%``
(``tests.fakes.search.article``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.claims.uncited import states_a_number, uncited_statements
from core.llm import ChatModel
from core.operations.job import run_attended
from core.pages.fetch import PageFetcher
from core.pages.reader import PageReader
from core.research.policy import Reading
from core.values import RunStatus
from tests.cli import fathom
from tests.fakes import Fail, FakeLLMServer, FakeSearchServer, Reply
from tests.test_citation_forms import TOPIC, address, research, said
from tests.test_engine import KEY, Harness, harness  # noqa: F401

#: A report whose first citation is [3]: the report renumbers it [1]. The third claim copies
#: source 2 but cites source 1 (re-cited to 2); the fourth states a figure no source has and
#: is the only one citing source 4 (marked, its citation removed: 4 is not listed).
FIRST_CITES_THREE = (
    "# Heat pumps\n\n## Main findings\n\n"
    f"- {said(3)} [3]\n- {said(1)} [1]\n- {said(2)} [1]\n- {said(4, rose='417%')} [4]\n"
)


def check_numbers(claims: list[dict[str, Any]], sources: list[dict[str, Any]], url: Any) -> None:
    """Each claim's numbers name, in ``sources``, the addresses of the sources it cited."""
    url_of = {s["n"]: s["url"] for s in sources}
    assert sorted(url_of) == [1, 2, 3]  # source 4 is cited nowhere any more
    three, one, miscited, invented = claims
    assert [url_of[n] for n in three["cited"]] == [url(3)]
    assert [url_of[n] for n in one["cited"]] == [url(1)]
    assert [url_of[n] for n in miscited["cited"]] == [url(1)]
    assert (miscited["fixed"], url_of[miscited["source"]]) == ("recited", url(2))
    assert (invented["fixed"], invented["cited"], invented["source"]) == ("unverified", [], None)


def test_claims_cite_by_the_numbers_of_the_sources_listed_with_them(
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """``claims[].cited`` and ``claims[].source`` of ``--json`` resolve in its ``sources``
    (the report cites [3] first, so source 3 is listed as [1]), and the report says so."""
    data = research(llm_server, cli_env, tmp_path, FIRST_CITES_THREE)
    check_numbers(data["claims"], data["sources"], lambda i: address(search_server, i))
    findings = data["report_markdown"].split("## Main findings\n\n", 1)[1]
    lines = findings.split("\n\n", 1)[0].splitlines()
    assert lines[:3] == [f"- {said(3)} [1]", f"- {said(1)} [2]", f"- {said(2)} [3]"]


async def test_the_stored_check_cites_by_the_stored_sources_numbers(
    llm_server: FakeLLMServer,
    harness: Harness,  # noqa: F811
) -> None:
    """The run's stored ``claim_check`` has the same numbers: a replica that shows the run
    later (nothing in memory) lists the same claims, resolving in the stored sources."""
    llm_server.fake.citing = "mixed"
    llm_server.fake.script("writer", Reply(FIRST_CITES_THREE))
    verifier = ChatModel(model="verifier", api_key=KEY, base_url=harness.llm.base_url)
    async with httpx.AsyncClient(trust_env=False) as pages:
        reader = PageReader(PageFetcher(pages, allow_loopback=True), pages=3)
        service = harness.build_service(verifier=verifier, reading=Reading(pages=reader))
        run_id = await harness.submit(TOPIC, depth=1)
        try:
            outcome = await run_attended(service, run_id, None)
        finally:
            reader.close()
            await verifier.aclose()
    assert outcome.status is RunStatus.SUCCEEDED, outcome.error
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and run.claim_check is not None
    stored = (await harness.build_service().executor.stored_outcome(run)).as_json()
    assert stored["claims"] == outcome.as_json()["claims"]
    assert isinstance(stored["claims"], list) and isinstance(stored["sources"], list)
    check_numbers(stored["claims"], stored["sources"], lambda i: address(harness.search, i))


#: A report in the structure the writer is asked for (core/research/prompts.py: summary,
#: findings, conclusions, "## Open questions and uncertainties"), with four uncited factual
#: sentences: the first two of the summary, a list item and a table row.
UNCITED = f"""# Heat pumps in 2026

## Executive summary

Adoption rose 12% in 2026. 三家公司占据了市场。 Heat pumps are popular.

## Main findings

- {said(1)} [1]
- Installations doubled since 2020.
- Heat pumps run on electricity.

| Year | Share |
|---|---|
| 2025 | 40% |

## Open questions and uncertainties

- Will adoption pass 50% by 2030?
- Costs in 2030 remain unknown.
"""


@pytest.mark.parametrize("verify", ["1", "0"])
def test_the_uncited_factual_sentences_are_counted_in_json(
    verify: str, llm_server: FakeLLMServer, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """``uncited_claims`` counts the summary's figure, the Chinese count, the item and the
    table row that cite nothing; not the title, the sentences without a number, the open
    questions, nor the notes the report gets; with the claim check off too."""
    llm_server.fake.script("writer", Reply(UNCITED))
    env = {**cli_env, "FATHOM_VERIFY_CLAIMS": verify}
    result = fathom("research", TOPIC, "--depth", "1", "--json", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["uncited_claims"] == 4
    assert len(data["claims"]) == (1 if verify == "1" else 0)
    # the check off: nothing checked, so no claim_check that could read as a whole check
    checked = {"partial": False, "unchecked": 0, "reasons": []}
    assert data["claim_check"] == (checked if verify == "1" else None)


async def test_the_uncited_count_is_stored_with_the_run(
    llm_server: FakeLLMServer,
    harness: Harness,  # noqa: F811
) -> None:
    """The stored check summary holds the count: a replica that shows the run later says the
    same ``uncited_claims``."""
    llm_server.fake.script("writer", Reply(UNCITED))
    verifier = ChatModel(model="verifier", api_key=KEY, base_url=harness.llm.base_url)
    run_id = await harness.submit(TOPIC, depth=1)
    try:
        await run_attended(harness.build_service(verifier=verifier), run_id, None)
    finally:
        await verifier.aclose()
    run = await harness.store.runs.get_run(run_id)
    assert run is not None and run.claim_check is not None
    assert run.claim_check["uncited"] == 4
    stored = await harness.build_service().executor.stored_outcome(run)
    assert stored.as_json()["uncited_claims"] == 4


def test_a_run_whose_writer_failed_has_no_uncited_count(
    llm_server: FakeLLMServer, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The findings listed instead of a report are not the writer's: ``uncited_claims`` is
    null, not a count of zero."""
    llm_server.fake.script("writer", Fail(500), Fail(500))
    result = fathom("research", TOPIC, "--depth", "1", "--json", env=cli_env, cwd=tmp_path)
    data = json.loads(result.stdout)
    assert data["status"] == "succeeded" and data["report_markdown"]
    assert data["uncited_claims"] is None


@pytest.mark.parametrize(
    ("sentence", "counted"),
    [
        ("Adoption rose 12% in 2026.", True),
        ("Installed costs fell to 1,200 dollars per kW.", True),
        ("The grid added 3.5 GW.", True),
        ("Sales doubled last year.", True),
        ("Three vendors lead the market.", True),
        ("Revenue reached two billion dollars.", True),
        ("The share is 40 percent.", True),
        ("Heat pumps are popular in Norway.", False),
        ("GPT-4 and COVID-19 are names, as is the H100.", False),
        ("One of the largest markets is Norway.", False),
        ("Will adoption pass 50% by 2030?", False),  # a question
        ("销量增长了12%。", True),
        ("市场规模达到百分之四十。", True),
        ("装机量超过3万台。", True),
        ("销量增长了两倍。", True),
        ("二〇二四年销量创新高。", True),
        ("三月份价格上涨。", True),
        ("三家公司占据了市场。", True),
        ("一种新的技术正在普及。", False),  # 一 alone means "a"
        ("热泵在寒冷地区也能工作。", False),
        ("销量会超过一万台吗？", False),
    ],
)
def test_what_states_a_number(sentence: str, counted: bool) -> None:
    assert states_a_number(sentence) is counted


def test_the_sections_that_are_not_counted() -> None:
    """Headings, the sources, notes and open questions sections (and their sub-headings) are
    not counted; a theme about uncertainty under the findings is, and so are the sections
    after the open questions."""
    report = (
        "# Heat pumps in 2026\n\n## 2026 outlook\n\nSales rose 12%.\n\n"
        "### Regulatory uncertainty\n\nThree rules changed.\n\n"
        "## 未解决的问题与不确定性\n\n- 2030年的成本仍不清楚。\n\n"
        "### 技术\n\n- 5种技术尚待验证。\n\n"
        "## Limitations\n\n- Only 4 sources were read.\n\n"
        "## Conclusions\n\nPrices fell 5%.\n\n"
        "## Notes on this run\n\n- The search for 2 topics failed.\n\n"
        "## Sources\n\n- [1] Report 2026\n"
    )
    assert uncited_statements(report) == [
        "Sales rose 12%.",
        "Three rules changed.",
        "Prices fell 5%.",
    ]
