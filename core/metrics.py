"""What one process has done, for Prometheus (``GET /metrics``).

Counters are counted where the work happens (runs, LLM calls, searches, deliveries); gauges
that describe the whole deployment (runs by status, the queue, who holds which lease) are read
when scraped. Each process has its own registry (no module-level state), so two apps in one
test process never mix their numbers. The registry also has prometheus_client's process
collector (``process_resident_memory_bytes``, ``process_open_fds``, CPU seconds, ...).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

from core.build import commit, python_version, version

__all__ = ["CONTENT_TYPE", "Metrics"]

RUN_SECONDS = (5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600)


class Metrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.runs_finished = Counter(
            "fathom_runs_finished",
            "Research runs that ended, by status, platform and strategy.",
            ["status", "platform", "strategy"],
            registry=registry,
        )
        self.run_seconds = Histogram(
            "fathom_run_duration_seconds",
            "Wall time of finished research runs.",
            ["strategy"],
            buckets=RUN_SECONDS,
            registry=registry,
        )
        self.rounds_done = Counter(  # the rounds_done of every attempt, summed
            "fathom_rounds",
            "Search rounds done (graph runs: planner turns).",
            ["strategy"],
            registry=registry,
        )
        self.llm_calls = Counter(
            "fathom_llm_calls",
            "LLM calls by model and outcome (ok, error).",
            ["model", "outcome"],
            registry=registry,
        )
        self.llm_tokens = Counter(
            "fathom_llm_tokens",
            "LLM tokens by model and kind (prompt, completion).",
            ["model", "kind"],
            registry=registry,
        )
        self.searches = Counter(
            "fathom_searches",
            "Searches by provider and outcome (ok, empty, error).",
            ["provider", "outcome"],
            registry=registry,
        )
        self.cost = Counter(
            "fathom_cost_dollars",
            "What runs cost in US dollars at FATHOM_PRICES, by model (searches: model "
            '"search"); unpriced models are not counted.',
            ["model"],
            registry=registry,
        )
        self.mcp_calls = Counter(
            "fathom_mcp_calls",
            "Calls to the MCP servers of team knowledge by server and outcome (ok, error, "
            "timeout).",
            ["server", "outcome"],
            registry=registry,
        )
        self.feedback = Counter(
            "fathom_feedback",
            "Votes on reports (up, down); a changed vote counts again under its new value.",
            ["value"],
            registry=registry,
        )
        self.pages = Counter(
            "fathom_pages",
            "Result pages by outcome (read, skipped).",
            ["outcome"],
            registry=registry,
        )
        self.platform_calls = Counter(
            "fathom_platform_calls",
            "Reports delivered to chat platforms and failed posts, by platform and outcome "
            "(delivered, failed, error).",
            ["platform", "outcome"],
            registry=registry,
        )
        self.claims = Counter(
            "fathom_claims",
            "Cited claims of reports checked against their sources, by verdict (supported, "
            "partial, unsupported, contradicted; unchecked: not checked).",
            ["verdict"],
            registry=registry,
        )
        self.build_info = Gauge(
            "fathom_build_info",
            "Always 1: the version of Fathom this process runs, the commit it was built from "
            "(unknown when the build did not say) and its Python.",
            ["version", "python", "commit"],
            registry=registry,
        )
        self.build_info.labels(version(), python_version(), commit()).set(1)
        self.runs = Gauge(
            "fathom_runs",
            "Research runs queued or running now, by status and platform (read when "
            "scraped); runs that ended are counted by fathom_runs_finished_total.",
            ["status", "platform"],
            registry=registry,
        )
        self.queue_depth = Gauge(
            "fathom_queue_depth",
            "Runs queued and not yet taken by a runner (read when scraped).",
            registry=registry,
        )
        self.lease_holder = Gauge(
            "fathom_lease_holder",
            "1 when this process holds the named lease (a connection, the digest scheduler).",
            ["lease"],
            registry=registry,
        )
        self.asyncio_tasks = Gauge(
            "fathom_asyncio_tasks",
            "Asyncio tasks alive in the server's event loop (read when scraped).",
            registry=registry,
        )
        self.db_connections = Gauge(
            "fathom_db_connections",
            "Database connections of this process by pool (store: the store's transactions; "
            "engine: the async engine, when it is another pool) and state (checked_out, open) "
            "(read when scraped).",
            ["pool", "state"],
            registry=registry,
        )
        ProcessCollector(registry=registry)

    def llm_call(self, model: str, ok: bool, prompt_tokens: int, completion_tokens: int) -> None:
        self.llm_calls.labels(model, "ok" if ok else "error").inc()
        if prompt_tokens:
            self.llm_tokens.labels(model, "prompt").inc(prompt_tokens)
        if completion_tokens:
            self.llm_tokens.labels(model, "completion").inc(completion_tokens)

    def run_cost(self, dollars_by_model: dict[str, float]) -> None:
        """Count what an attempt of a run cost (``Prices.cost_by_model``)."""
        for model, dollars in dollars_by_model.items():
            self.cost.labels(model).inc(dollars)

    def mcp_call(self, server: str, outcome: str) -> None:
        """Count one search of an MCP server (``outcome``: ok, error or timeout)."""
        self.mcp_calls.labels(server, outcome).inc()

    def run_finished(
        self,
        *,
        status: str,
        platform: str,
        strategy: str,
        seconds: float | None,
        rounds_done: int,
        pages_read: int,
        pages_skipped: int,
    ) -> None:
        """Count a finished attempt of a run; rounds and pages are those of the attempt."""
        self.runs_finished.labels(status, platform, strategy).inc()
        if seconds is not None:
            self.run_seconds.labels(strategy).observe(seconds)
        self.rounds_done.labels(strategy).inc(rounds_done)
        self.pages.labels("read").inc(pages_read)
        self.pages.labels("skipped").inc(pages_skipped)

    def claims_checked(self, verdicts: list[str | None]) -> None:
        """Count the checked claims of a report by verdict (None: unchecked)."""
        for verdict in verdicts:
            self.claims.labels(verdict or "unchecked").inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
