"""What one process has done, for Prometheus (``GET /metrics``).

Counters and histograms are counted where the work happens (runs, LLM calls, searches,
pages, platform calls, claims); gauges are exported only by the process that sets them: the
state of ``fathom serve`` itself (``role="serve"``: leases, event-loop tasks, database
connections), and the runs and queue of the whole deployment only by the replica that holds
the digest scheduler (:class:`DeploymentGauges`), so a sum over replicas is right. A worker
exports no gauge it never sets. Each process has its own registry (no module-level state), so
two apps in one test process never mix their numbers. The registry also has
prometheus_client's process collector (``process_resident_memory_bytes``,
``process_open_fds``, ``process_start_time_seconds``, CPU seconds, ...).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from core.build import commit, python_version, version

__all__ = ["CONTENT_TYPE", "DeploymentGauges", "Metrics", "Role"]

RUN_SECONDS = (5, 10, 20, 30, 60, 120, 300, 600, 1200, 3600)
#: Seconds of one outbound call (a model, a search, a page, a platform's API).
CALL_SECONDS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120)

#: ``serve`` (routes, leases, the digest scheduler) or ``worker`` (runs from the queue only).
Role = Literal["serve", "worker"]


class DeploymentGauges(Collector):
    """``fathom_runs{status,platform}`` and ``fathom_queue_depth``: the runs of the whole
    deployment, exported only while :meth:`show` has been given counts, i.e. by the replica
    that holds the digest scheduler (``bots.http_status`` calls :meth:`hide` on the others),
    so a sum over replicas counts each run once."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] | None = None

    def show(self, counts: dict[tuple[str, str], int]) -> None:
        self._counts = dict(counts)

    def hide(self) -> None:
        self._counts = None

    @property
    def shown(self) -> bool:
        return self._counts is not None

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return self._families({})

    def collect(self) -> Iterable[GaugeMetricFamily]:
        return self._families(self._counts) if self._counts is not None else ()

    @staticmethod
    def _families(counts: dict[tuple[str, str], int]) -> Iterator[GaugeMetricFamily]:
        runs = GaugeMetricFamily(
            "fathom_runs",
            "Research runs queued or running now in the whole deployment, by status and "
            "platform (read when scraped, exported by the digest scheduler's holder only); "
            "runs that ended are counted by fathom_runs_finished_total.",
            labels=["status", "platform"],
        )
        for (status, platform), n in sorted(counts.items()):
            runs.add_metric([status, platform], n)
        yield runs
        queue = GaugeMetricFamily(
            "fathom_queue_depth",
            "Runs of the whole deployment queued and not yet taken by a runner (read when "
            "scraped, exported by the digest scheduler's holder only).",
        )
        if counts:
            queue.add_metric([], sum(n for (status, _), n in counts.items() if status == "queued"))
        yield queue


class Metrics:
    def __init__(self, role: Role = "serve") -> None:
        self.role = role
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
            "(delivered, failed, error); each API call is fathom_platform_api_calls_total.",
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
        self.platform_api_calls = Counter(
            "fathom_platform_api_calls",
            "Calls of a chat platform's API made to deliver runs, by platform, method "
            "(post_progress, edit_progress, post_report, post_notice, download) and outcome "
            "(ok; rate_limited; error: worth another try, a 5xx or the network; refused: "
            "final).",
            ["platform", "method", "outcome"],
            registry=registry,
        )
        self.platform_api_seconds = Histogram(
            "fathom_platform_api_call_seconds",
            "Seconds of a chat platform's API call made to deliver runs, by platform and "
            "method, failed calls included.",
            ["platform", "method"],
            buckets=CALL_SECONDS,
            registry=registry,
        )
        self.llm_seconds = Histogram(
            "fathom_llm_call_seconds",
            "Seconds of one LLM call (each try of it), by model, failed calls included.",
            ["model"],
            buckets=CALL_SECONDS,
            registry=registry,
        )
        self.search_seconds = Histogram(
            "fathom_search_seconds",
            "Seconds of one web search, by provider, failed searches included.",
            ["provider"],
            buckets=CALL_SECONDS,
            registry=registry,
        )
        self.page_seconds = Histogram(
            "fathom_page_fetch_seconds",
            "Seconds of fetching and extracting one result page (or a page cache hit), by "
            "outcome (read, skipped).",
            ["outcome"],
            buckets=CALL_SECONDS,
            registry=registry,
        )
        self.claims_taken = Counter(
            "fathom_run_claims",
            "Runs this process took, by how (new: queued and never started; resumed: queued "
            "again after a handed-back attempt, continued from its checkpoint; taken_over: "
            "running, its runner's heartbeat expired or its process died; delivery: finished, "
            "its delivering runner died).",
            ["how"],
            registry=registry,
        )
        self.runs_requeued = Counter(
            "fathom_runs_requeued",
            "Running runs this process handed back to the queue (shutdown, a lost database, "
            "a cancelled job), for any runner to continue.",
            registry=registry,
        )
        self.ingress_requests = Counter(
            "fathom_ingress_requests",
            "HTTP requests answered by route (a route's path, or other) and status; those "
            "refused for their signature or token (401) are fathom_ingress_refused_total.",
            ["route", "status"],
            registry=registry if role == "serve" else None,
        )
        self.ingress_refused = Counter(
            "fathom_ingress_refused",
            "HTTP requests refused for their platform signature or token (401), by route.",
            ["route"],
            registry=registry if role == "serve" else None,
        )
        self.build_info = Gauge(
            "fathom_build_info",
            "Always 1: the version of Fathom this process runs, the commit it was built from "
            "(unknown when the build did not say) and its Python.",
            ["version", "python", "commit"],
            registry=registry,
        )
        self.build_info.labels(version(), python_version(), commit()).set(1)
        self.deployment = DeploymentGauges()
        if role == "serve":  # a worker sets none of these: it exports none of them
            registry.register(self.deployment)
        self.lease_holder = Gauge(
            "fathom_lease_holder",
            "1 when this process holds the named lease (a connection, the digest scheduler).",
            ["lease"],
            registry=registry if role == "serve" else None,
        )
        self.asyncio_tasks = Gauge(
            "fathom_asyncio_tasks",
            "Asyncio tasks alive in the server's event loop (read when scraped).",
            registry=registry if role == "serve" else None,
        )
        self.db_connections = Gauge(
            "fathom_db_connections",
            "Database connections of this process by pool (store: the store's transactions; "
            "engine: the async engine, when it is another pool) and state (checked_out, open) "
            "(read when scraped).",
            ["pool", "state"],
            registry=registry if role == "serve" else None,
        )
        ProcessCollector(registry=registry)

    def llm_call(self, model: str, ok: bool, prompt_tokens: int, completion_tokens: int) -> None:
        self.llm_calls.labels(model, "ok" if ok else "error").inc()
        if prompt_tokens:
            self.llm_tokens.labels(model, "prompt").inc(prompt_tokens)
        if completion_tokens:
            self.llm_tokens.labels(model, "completion").inc(completion_tokens)

    def platform_call(self, platform: str, method: str, outcome: str, seconds: float) -> None:
        """Count one call of a chat platform's API and how long it took."""
        self.platform_api_calls.labels(platform, method, outcome).inc()
        self.platform_api_seconds.labels(platform, method).observe(seconds)

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
