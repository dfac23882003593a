"""The composition root keeps what it builds in one place (``bots/composition.py``: the
platforms, the digest scheduler, the elections, housekeeping; the server, whose size
``tests/test_sizes.py`` keeps, only starts them), and no part of ``bots/`` reaches through the
research service into its executor (``research.executor.``): the claims' owner and the lease
come from its policy."""

from __future__ import annotations

from pathlib import Path

from bots.composition import open_app
from bots.platforms import PLATFORMS, PlatformEntry
from tests.chat_app import fathom_settings, wait_for
from tests.databases import MigratedTemplates
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.toy_platform import TOY

BOTS = Path(__file__).resolve().parent.parent / "bots"


def test_no_part_of_bots_reaches_into_the_executor_through_the_research_service() -> None:
    reaching = [
        f"{path.relative_to(BOTS.parent)}:{number}"
        for path in sorted(BOTS.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "research.executor." in line
    ]
    assert reaching == []


async def test_serve_s_parts_are_built_by_the_composition_root_and_started_by_it(
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    templates: MigratedTemplates,
) -> None:
    """``open_app`` builds the digest scheduler, housekeeping and the opened platforms'
    ingress for ``serve`` (``App.start`` starts them; the server's lifespan only asks it to);
    the toy platform, which holds no long-lived connection, gets no election."""
    url = templates.sqlite(tmp_path / "serve.db")
    registry = (*PLATFORMS, PlatformEntry(TOY, "Toy", "tests.toy_platform:ToyPlatform"))
    settings = fathom_settings(url, llm_server, search_server, registry=registry, TOY_TOKEN="t")
    async with open_app(settings, role="serve") as built:
        assert list(built.platforms) == [TOY] and built.opened[TOY].ingress is not None
        assert built.scheduler is not None and built.housekeeping is not None
        assert built.holders == {}
        await built.start()
        scheduler = built.scheduler
        await wait_for(lambda: scheduler.holder)  # the only replica: it takes the lease


async def test_the_document_threshold_reaches_every_opened_platforms_posters(
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    templates: MigratedTemplates,
) -> None:
    """``FATHOM_REPORT_DOCUMENT_PARTS`` is set on the posters of each platform opened
    (``bots.chat.documents``); the default is 2."""
    url = templates.sqlite(tmp_path / "documents.db")
    registry = (*PLATFORMS, PlatformEntry(TOY, "Toy", "tests.toy_platform:ToyPlatform"))
    for parts in ("5", "0", None):
        given = {"FATHOM_REPORT_DOCUMENT_PARTS": parts} if parts is not None else {}
        settings = fathom_settings(
            url,
            llm_server,
            search_server,
            registry=registry,
            TOY_TOKEN="t",
            **given,
        )
        async with open_app(settings, role="serve") as built:
            assert built.opened[TOY].posters.document_parts == int(parts or 2)
