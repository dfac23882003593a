"""Numbers that agree (issue 52, item 7): the claims of ``--json`` (and of the stored run) cite
by the numbers of the same output's ``sources``.

The runs are real (``fathom research --json``, or the executor and a second replica, against
the fakes); the writer is scripted, the fake verifier judges by what the sources say
(``FakeLLM.citing = "mixed"``). The sources are the fake search's results for the fake
planner's first topic: the page of result ``i`` says ``adoption rose {10+i}%``
(``tests.fakes.search.article``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from core.llm import ChatModel
from core.pages.fetch import PageFetcher
from core.pages.reader import PageReader
from storage.values import RunStatus
from tests.fakes import FakeLLMServer, FakeSearchServer, Reply
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
        service = harness.build_service(verifier=verifier, reader=reader)
        run_id = await harness.submit(TOPIC, depth=1)
        try:
            outcome = await service.executor.execute(run_id, None)
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
