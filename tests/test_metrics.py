"""``GET /metrics``: what a served app has done, in Prometheus' text format."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from core.metrics import Metrics
from storage import Store
from tests.chat_app import wait_for
from tests.conftest import ServeFathom
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.fakes.feishu import encrypt, message_event, signed_headers
from tests.runs import new_run
from tests.test_feishu import (  # noqa: F401 (fixtures)
    KEY,
    TOKEN,
    FeishuFactory,
    feishu,
    llm,
    search,
)

#: Gauges that only ``fathom serve`` sets (a worker exports none of them).
SERVE_GAUGES = (
    "fathom_runs",
    "fathom_queue_depth",
    "fathom_lease_holder",
    "fathom_asyncio_tasks",
    "fathom_db_connections",
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
    assert ("fathom_queue_depth", frozenset()) in samples(text)  # the holder exports it
    assert value(text, "fathom_lease_holder", lease="digest-scheduler") == 1
    # Each call of Feishu's API for the run, by method and outcome, and timed.
    calls = {
        dict(labels)["method"]: n
        for (name, labels), n in samples(text).items()
        if name == "fathom_platform_api_calls_total"
        and dict(labels)["platform"] == "feishu"
        and dict(labels)["outcome"] == "ok"
    }
    assert calls["post_progress"] == 1  # one progress message, edited in place
    assert calls["edit_progress"] >= 1
    assert calls["post_report"] == run.report_parts_posted
    assert len(bot.fake.calls_to("reply")) == 1 + run.report_parts_posted
    timed = value(
        text, "fathom_platform_api_call_seconds_count", platform="feishu", method="post_report"
    )
    assert timed == run.report_parts_posted
    # Latency of model, search and page calls: one observation per call.
    assert value(text, "fathom_llm_call_seconds_count", model="gpt-4o") == run.llm_calls
    assert value(text, "fathom_search_seconds_count", provider="searxng") == 2
    assert value(text, "fathom_page_fetch_seconds_count", outcome="read") == 6
    assert value(text, "fathom_run_claims_total", how="new") == 1
    # The request itself, by route and status (the scrapes by theirs).
    assert value(text, "fathom_ingress_requests_total", route="/feishu/events", status="200") == 1
    assert value(text, "fathom_ingress_requests_total", route="/metrics", status="200") == 1


async def test_a_failed_progress_edit_is_counted_by_platform_method_and_outcome(
    feishu: FeishuFactory,  # noqa: F811
    llm: FakeLLMServer,  # noqa: F811
) -> None:
    """Feishu answering HTTP 500 to the card update (``PATCH /im/v1/messages/:id``, its
    ``patch``): the run still ends, and the failed edit shows on /metrics."""
    bot = await feishu()
    llm.fake.latency = 0.1  # progress edits apart from each other
    bot.fake.fail_next("patch", status=500)
    event = message_event("/research heat pumps depth=2", token=TOKEN, message_id="om_m2")
    assert (await bot.send(event)).status_code == 200
    (run,) = await bot.delivered()
    assert run.status == "succeeded"
    text = (await bot.served.http.get(f"{bot.served.url}/metrics")).text
    edits = {"platform": "feishu", "method": "edit_progress"}
    assert value(text, "fathom_platform_api_calls_total", **edits, outcome="error") == 1
    assert value(text, "fathom_platform_api_calls_total", **edits, outcome="ok") >= 1
    assert value(text, "fathom_platform_api_calls_total", **edits, outcome="refused") == 0
    failed = value(text, "fathom_platform_api_calls_total", **edits, outcome="error")
    ok = value(text, "fathom_platform_api_calls_total", **edits, outcome="ok")
    assert value(text, "fathom_platform_api_call_seconds_count", **edits) == failed + ok
    assert len(bot.fake.calls_to("patch")) == failed + ok


async def test_requests_with_a_refused_signature_are_counted_apart(
    feishu: FeishuFactory,  # noqa: F811
) -> None:
    """Feishu's signed, encrypted event callbacks (``X-Lark-Signature``): a forged one is
    refused (401) and counted in fathom_ingress_refused_total, not as traffic; an unknown
    path is ``other``, never its own series."""
    bot = await feishu()
    url = f"{bot.served.url}/feishu/events"
    body = json.dumps(encrypt(message_event("/research x", token=TOKEN), KEY)).encode()
    forged = await bot.served.http.post(
        url, content=body, headers=signed_headers(body, "another key")
    )
    assert forged.status_code == 401
    assert (await bot.served.http.get(f"{bot.served.url}/wp-login.php")).status_code == 404
    text = (await bot.served.http.get(f"{bot.served.url}/metrics")).text
    assert value(text, "fathom_ingress_refused_total", route="/feishu/events") == 1
    assert value(text, "fathom_ingress_requests_total", route="/feishu/events", status="401") == 0
    assert value(text, "fathom_ingress_requests_total", route="other", status="404") == 1
    routes = {
        dict(labels)["route"]
        for (name, labels) in samples(text)
        if name.startswith("fathom_ingress_")
    }
    assert "/wp-login.php" not in routes


def test_a_worker_exports_no_gauge_it_never_sets() -> None:
    """A worker's registry has the research counters and none of serve's gauges (it never
    sets them: summed over replicas they would only add zeros, or worse, stale values)."""
    worker = Metrics(role="worker").exposition().decode()
    serving = Metrics(role="serve")
    standby = {f.name for f in text_string_to_metric_families(serving.exposition().decode())}
    serving.deployment.show({("queued", "slack"): 2, ("running", "slack"): 1})
    holder = serving.exposition().decode()
    worker_names = {f.name for f in text_string_to_metric_families(worker)}
    serve_names = {f.name for f in text_string_to_metric_families(holder)}
    for gauge in SERVE_GAUGES:
        assert gauge not in worker_names
        assert gauge in serve_names
    # The deployment's runs: only on the replica holding the scheduler (shown), once.
    assert {"fathom_runs", "fathom_queue_depth"}.isdisjoint(standby)
    assert value(holder, "fathom_queue_depth") == 2
    assert value(holder, "fathom_runs", status="running", platform="slack") == 1
    assert "fathom_ingress_requests" not in worker_names
    assert {"fathom_platform_api_calls", "fathom_run_claims", "fathom_build_info"} <= (worker_names)


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


async def test_the_deployments_runs_are_exported_by_one_replica_only(
    serve_fathom: ServeFathom, database_url: str, store: Store
) -> None:
    """Two ``fathom serve`` replicas on one database: the runs queued now are exported by the
    replica holding the digest scheduler alone, so ``sum(fathom_queue_depth)`` over the
    replicas counts each run once."""
    await new_run(store, topic="waiting in line")  # queued, on a platform neither serves
    first = await serve_fathom(database_url=database_url)
    second = await serve_fathom(database_url=database_url)

    async def both_scraped() -> list[str] | None:
        texts = [(await s.http.get(f"{s.url}/metrics")).text for s in (first, second)]
        holders = [value(t, "fathom_lease_holder", lease="digest-scheduler") for t in texts]
        return texts if sorted(holders) == [0, 1] else None

    texts: list[str] = await wait_for(both_scraped)
    exported = [t for t in texts if ("fathom_queue_depth", frozenset()) in samples(t)]
    assert len(exported) == 1
    (holder,) = exported
    assert value(holder, "fathom_lease_holder", lease="digest-scheduler") == 1
    assert sum(value(t, "fathom_queue_depth") for t in texts) == 1
    (standby,) = [t for t in texts if t is not holder]
    assert not any(name == "fathom_runs" for name, _ in samples(standby))
