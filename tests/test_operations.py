"""What an operator scrapes and probes in the recommended topology (serve queues, workers
research, on PostgreSQL): every process's metrics, and internals kept off the public port.
Real `fathom serve` and `fathom worker` processes."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.fakes.slack import FakeSlackServer
from tests.test_metrics import SERVE_GAUGES, samples, value
from tests.test_replicas import postgres_url, wait_until  # noqa: F401 (fixture)
from tests.test_schema_rollout import _delivered, _research, _stop, _worker
from tests.test_serve import (  # noqa: F401 (fixtures)
    Served,
    free_port,
    serve,
    slack_env,
    terminate,
    wait_until_up,
)


def test_the_worker_exports_the_counters_of_the_research_it_executes(
    slack_env: dict[str, str],  # noqa: F811
    slack_server: FakeSlackServer,
    postgres_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    """With FATHOM_QUEUE=procrastinate a run is executed, and counted, in a worker: its
    `--metrics-port` serves that run's counters (the run, its model calls and tokens, its
    searches, its pages, its platform calls). Serve's `--admin-port` serves /readyz and
    /metrics, which the public port no longer shows, and the platform routes stay on the
    public port only."""
    env = {**slack_env, "DATABASE_URL": postgres_url, "FATHOM_QUEUE": "procrastinate"}
    admin, metrics = free_port(), free_port()
    served = serve(env, tmp_path, "--admin-port", str(admin))
    worker = _worker(env, tmp_path, "--no-upgrade", "--metrics-port", str(metrics))
    admin_url, worker_url = f"http://127.0.0.1:{admin}", f"http://127.0.0.1:{metrics}"
    try:
        wait_until_up(served)
        wait_until(lambda: httpx.get(f"{admin_url}/readyz").status_code == 200, served.stderr)
        assert httpx.get(f"{served.url}/readyz").status_code == 404
        assert httpx.get(f"{served.url}/metrics").status_code == 404
        assert httpx.get(f"{admin_url}/healthz").status_code == 200
        assert httpx.post(f"{admin_url}/slack/events", content=b"{}").status_code == 404
        assert _research(served, "metrics").status_code == 200
        wait_until(lambda: _delivered(postgres_url), served.stderr, 60)
        scraped = httpx.get(f"{worker_url}/metrics").text
        serve_scraped = httpx.get(f"{admin_url}/metrics").text
    finally:
        assert _stop(worker) == 0
        assert terminate(served) == 0
    finished = {"status": "succeeded", "platform": "slack", "strategy": "iterative"}
    assert value(scraped, "fathom_runs_finished_total", **finished) == 1
    assert value(scraped, "fathom_llm_calls_total", model="gpt-4o", outcome="ok") == 2
    assert value(scraped, "fathom_llm_tokens_total", model="gpt-4o", kind="prompt") > 0
    assert value(scraped, "fathom_searches_total", provider="searxng", outcome="ok") == 1
    assert value(scraped, "fathom_pages_total", outcome="read") > 0
    assert value(scraped, "fathom_platform_calls_total", platform="slack", outcome="delivered") == 1
    reports = {"platform": "slack", "method": "post_report", "outcome": "ok"}
    assert value(scraped, "fathom_platform_api_calls_total", **reports) >= 1
    assert value(scraped, "fathom_llm_call_seconds_count", model="gpt-4o") == 2
    assert value(scraped, "fathom_search_seconds_count", provider="searxng") == 1
    assert value(scraped, "fathom_run_claims_total", how="new") == 1
    # The worker exports no gauge it never sets (serve's, the deployment's runs).
    worker_names = {name for name, _ in samples(scraped)}
    for gauge in SERVE_GAUGES:
        assert gauge not in worker_names, gauge
    # Serve queued it and executed nothing: its counters stay at zero; its gauge shows the
    # runs going on now (none).
    assert value(serve_scraped, "fathom_runs_finished_total", **finished) == 0
    assert value(serve_scraped, "fathom_runs", status="running", platform="slack") == 0
