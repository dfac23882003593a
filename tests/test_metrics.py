"""``GET /metrics``: what a served app has done, in Prometheus' text format."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from tests.chat_app import wait_for
from tests.fakes import FakeSearchServer
from tests.fakes.feishu import message_event
from tests.test_feishu import (  # noqa: F401 (fixtures)
    TOKEN,
    FeishuFactory,
    feishu,
    llm,
    search,
)


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, frozenset(labels.items())), 0.0)


async def test_metrics_count_runs_calls_searches_pages_deliveries_and_leases(
    feishu: FeishuFactory,  # noqa: F811
    search: FakeSearchServer,  # noqa: F811
) -> None:
    bot = await feishu()
    before = await bot.served.http.get(f"{bot.served.url}/metrics")
    assert before.status_code == 200 and before.headers["content-type"].startswith("text/plain")
    assert (
        value(
            before.text,
            "fathom_runs_finished_total",
            status="succeeded",
            platform="feishu",
            strategy="iterative",
        )
        == 0
    )
    event = message_event("/research heat pumps depth=2", token=TOKEN, message_id="om_m1")
    assert (await bot.send(event)).status_code == 200
    (run,) = await bot.delivered()
    assert run.status == "succeeded"
    text = (await bot.served.http.get(f"{bot.served.url}/metrics")).text
    finished = {"status": "succeeded", "platform": "feishu", "strategy": "iterative"}
    assert value(text, "fathom_runs_finished_total", **finished) == 1
    assert value(text, "fathom_run_duration_seconds_count", strategy="iterative") == 1
    assert value(text, "fathom_rounds_total", strategy="iterative") == 2
    assert value(text, "fathom_llm_calls_total", model="gpt-4o", outcome="ok") == run.llm_calls
    prompt = value(text, "fathom_llm_tokens_total", model="gpt-4o", kind="prompt")
    assert prompt == run.prompt_tokens > 0
    assert value(text, "fathom_searches_total", provider="searxng", outcome="ok") == 2
    assert len(search.fake.queries) == 2
    assert value(text, "fathom_pages_total", outcome="read") == run.pages_read == 6
    delivered = value(text, "fathom_platform_calls_total", platform="feishu", outcome="delivered")
    assert delivered == 1
    # The gauge reads runs queued or running now (an index), never every run ever made.
    gauge = {
        dict(labels)["status"]: n
        for (name, labels), n in samples(text).items()
        if name == "fathom_runs"
    }
    assert gauge == {"queued": 0, "running": 0}  # present at 0 (alerts need it), nothing else
    assert value(text, "fathom_queue_depth") == 0
    assert value(text, "fathom_lease_holder", lease="digest-scheduler") == 1


async def test_readyz_shows_the_queue(feishu: FeishuFactory) -> None:  # noqa: F811
    bot = await feishu()
    ready = await bot.served.readyz()
    assert ready["queue"] == {"kind": "local", "queued": 0, "running": 0}
    assert ready["scheduler"] == "holder"


async def test_metrics_show_tasks_connections_memory_and_fds(
    feishu: FeishuFactory,  # noqa: F811
) -> None:
    bot = await feishu()

    async def idle_scrape() -> str | None:
        """A scrape taken while no background step (the sweeper, housekeeping, the
        scheduler's tick) held a connection: those run on their own time."""
        text = (await bot.served.http.get(f"{bot.served.url}/metrics")).text
        busy = sum(
            value(text, "fathom_db_connections", pool=pool, state="checked_out")
            for pool in ("store", "engine")
        )
        return text if busy == 0 else None

    text: str = await wait_for(idle_scrape)
    # The scrape's own task, the runner's sweeper, housekeeping, the scheduler, uvicorn's.
    assert 3 <= value(text, "fathom_asyncio_tasks") < 100
    # SQLite: the store's one pysqlite connection (opened by the runs count of this very
    # scrape, back in its pool by now), and aiosqlite's pool beside it.
    assert value(text, "fathom_db_connections", pool="store", state="open") == 1
    engine_open = value(text, "fathom_db_connections", pool="engine", state="open")
    assert 0 <= engine_open <= 15
    assert ("fathom_db_connections", frozenset({("pool", "engine"), ("state", "open")})) in (
        samples(text)
    )
    # prometheus_client's process collector, on the same registry.
    assert value(text, "process_resident_memory_bytes") > 20e6
    assert 5 < value(text, "process_open_fds") < 10_000
