"""Core's own settings: database, models, search, page reading, limits, jobs, digests and
logging, read from the environment and ``.env`` (docs/configuration.md lists them) where the
process is put together (:mod:`core.runtime`, the CLI, the server).

A value is checked by the rules of the part that owns it: ``DATABASE_URL`` by storage's
(:func:`storage.db.check_url`), ``FATHOM_PRICES`` by the run's cost
(:class:`core.research.cost.Prices`), ``FATHOM_STRATEGY`` by the registry
(:data:`core.engine.registry.StrategyName`). This module sits above them all, beside the
runtime; the base every part's settings share is :mod:`core.config`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from core.config import (
    LEASE,
    VERIFY_SECONDS,
    ConfigError,
    EnvSettings,
    env,
    load,
    parse_duration,
)
from core.dates import zone
from core.engine.registry import StrategyName
from core.models import DEFAULT_STRATEGY
from core.research.cost import Prices
from storage.db import check_url

SearchProviderName = Literal["ddgs", "searxng", "tavily", "brave"]


class Settings(EnvSettings):
    """Core's settings: what a research run and its runners need, and nothing of any chat
    platform."""

    database_url: str = Field(
        default="sqlite+aiosqlite:///fathom.db", validation_alias=env("DATABASE_URL")
    )

    # LLM endpoints
    openai_api_key: str | None = Field(default=None, validation_alias=env("OPENAI_API_KEY"))
    openai_base_url: str | None = Field(default=None, validation_alias=env("OPENAI_BASE_URL"))
    planner_model: str = Field(default="gpt-4o", validation_alias=env("FATHOM_PLANNER_MODEL"))
    writer_model: str | None = Field(default=None, validation_alias=env("FATHOM_WRITER_MODEL"))
    writer_base_url: str | None = Field(
        default=None, validation_alias=env("FATHOM_WRITER_BASE_URL")
    )
    writer_api_key: str | None = Field(default=None, validation_alias=env("FATHOM_WRITER_API_KEY"))
    #: Every cited claim of a report checked against its sources before it is posted.
    verify_claims: bool = Field(default=True, validation_alias=env("FATHOM_VERIFY_CLAIMS"))
    #: The model that checks them; None: the planner's model.
    verifier_model: str | None = Field(default=None, validation_alias=env("FATHOM_VERIFIER_MODEL"))
    #: Its endpoint and key, for a judge of another family behind another endpoint; None: the
    #: planner's.
    verifier_base_url: str | None = Field(
        default=None, validation_alias=env("FATHOM_VERIFIER_BASE_URL")
    )
    verifier_api_key: str | None = Field(
        default=None, validation_alias=env("FATHOM_VERIFIER_API_KEY")
    )
    #: The check's own time budget: past it the report is posted with what was settled.
    verify_seconds: float = Field(
        default=VERIFY_SECONDS, gt=0, le=3600, validation_alias=env("FATHOM_VERIFY_SECONDS")
    )
    llm_json_mode: Literal["auto", "json_schema", "json_object", "prompt"] = Field(
        default="auto", validation_alias=env("FATHOM_LLM_JSON_MODE")
    )
    llm_timeout: float = Field(default=120.0, gt=0, validation_alias=env("FATHOM_LLM_TIMEOUT"))
    llm_max_retries: int = Field(
        default=3, ge=0, le=10, validation_alias=env("FATHOM_LLM_MAX_RETRIES")
    )

    # Search
    search: SearchProviderName = Field(default="ddgs", validation_alias=env("FATHOM_SEARCH"))
    searxng_url: str | None = Field(default=None, validation_alias=env("SEARXNG_URL"))
    tavily_api_key: str | None = Field(default=None, validation_alias=env("TAVILY_API_KEY"))
    tavily_base_url: str = Field(
        default="https://api.tavily.com", validation_alias=env("TAVILY_BASE_URL")
    )
    brave_api_key: str | None = Field(default=None, validation_alias=env("BRAVE_API_KEY"))
    brave_base_url: str = Field(
        default="https://api.search.brave.com/res/v1", validation_alias=env("BRAVE_BASE_URL")
    )
    search_max_results: int = Field(
        default=8, ge=1, le=50, validation_alias=env("FATHOM_SEARCH_MAX_RESULTS")
    )
    search_timeout: float = Field(default=20.0, gt=0, validation_alias=env("FATHOM_SEARCH_TIMEOUT"))
    search_cache_ttl: timedelta = Field(
        default=timedelta(hours=24), validation_alias=env("FATHOM_SEARCH_CACHE_TTL")
    )

    # Team knowledge: MCP servers searched beside the web (core.knowledge)
    mcp_config: str | None = Field(default=None, validation_alias=env("FATHOM_MCP_CONFIG"))
    mcp_timeout: float = Field(
        default=20.0, gt=0, le=600, validation_alias=env("FATHOM_MCP_TIMEOUT")
    )

    # Reading result pages
    read_pages: int = Field(default=3, ge=0, le=10, validation_alias=env("FATHOM_READ_PAGES"))
    page_tokens: int = Field(
        default=1500, ge=100, le=20000, validation_alias=env("FATHOM_PAGE_TOKENS")
    )
    page_timeout: float = Field(
        default=8.0, gt=0, le=120, validation_alias=env("FATHOM_PAGE_TIMEOUT")
    )
    page_max_bytes: int = Field(
        default=2 * 1024 * 1024,
        ge=16 * 1024,
        le=50 * 1024 * 1024,
        validation_alias=env("FATHOM_PAGE_MAX_BYTES"),
    )
    page_fetches: int = Field(default=20, ge=1, le=500, validation_alias=env("FATHOM_PAGE_FETCHES"))
    #: A PDF result: the pages read of it, and the seconds its text may take (a worker
    #: process that overruns is killed).
    pdf_max_pages: int = Field(
        default=50, ge=1, le=2000, validation_alias=env("FATHOM_PDF_MAX_PAGES")
    )
    pdf_timeout: float = Field(
        default=10.0, gt=0, le=120, validation_alias=env("FATHOM_PDF_TIMEOUT")
    )
    page_cache_ttl: timedelta = Field(
        default=timedelta(hours=24), validation_alias=env("FATHOM_PAGE_CACHE_TTL")
    )
    allow_private_fetch: bool = Field(
        default=False, validation_alias=env("FATHOM_ALLOW_PRIVATE_FETCH")
    )

    # Files attached in the chat
    attachment_max_bytes: int = Field(
        default=20 * 1024 * 1024,
        ge=1024,
        # (A file is held in memory while it is read, and a PDF worker has 512 MB in all.)
        le=50 * 1024 * 1024,
        validation_alias=env("FATHOM_ATTACHMENT_MAX_BYTES"),
    )
    attachments_per_request: int = Field(
        default=5, ge=0, le=20, validation_alias=env("FATHOM_ATTACHMENTS_PER_REQUEST")
    )

    # Limits
    default_depth: int = Field(default=3, ge=1, validation_alias=env("FATHOM_DEFAULT_DEPTH"))
    # Any positive depth may be allowed: the token and time budgets end a run that goes on.
    max_depth: int = Field(default=10, ge=1, validation_alias=env("FATHOM_MAX_DEPTH"))
    max_run_tokens: int = Field(
        default=300_000, ge=1, validation_alias=env("FATHOM_MAX_RUN_TOKENS")
    )
    max_run_seconds: float = Field(
        default=1200.0, gt=0, validation_alias=env("FATHOM_MAX_RUN_SECONDS")
    )
    #: JSON: model -> [input, output] US dollars per million tokens, "search": per call
    #: (:mod:`core.research.cost`, which checks them); unset: no cost is shown.
    prices: str | None = Field(default=None, validation_alias=env("FATHOM_PRICES"))

    @field_validator("prices")
    @classmethod
    def _valid_prices(cls, value: str | None) -> str | None:
        if value is not None and value.strip():
            Prices.parse(value)
            return value
        return None

    # Per chat user per day (in FATHOM_TIMEZONE), counted in the database; None: unlimited.
    user_daily_runs: int | None = Field(
        default=None, ge=1, validation_alias=env("FATHOM_USER_DAILY_RUNS")
    )
    user_daily_tokens: int | None = Field(
        default=None, ge=1, validation_alias=env("FATHOM_USER_DAILY_TOKENS")
    )
    max_process_searches: int = Field(
        default=100, ge=1, le=1000, validation_alias=env("FATHOM_MAX_PROCESS_SEARCHES")
    )
    #: The strategy of a run that names none (a registered one: core.engine.registry); each
    #: strategy's own settings are its module's (core.engine.graph.strategy's GraphSettings ...).
    strategy: StrategyName = Field(
        default=DEFAULT_STRATEGY, validation_alias=env("FATHOM_STRATEGY")
    )

    # Jobs
    queue: Literal["local", "procrastinate"] = Field(
        default="local", validation_alias=env("FATHOM_QUEUE")
    )
    max_concurrent_runs: int = Field(
        default=100, ge=1, le=10_000, validation_alias=env("FATHOM_MAX_CONCURRENT_RUNS")
    )
    stale_run_after: float = Field(
        default=180.0, ge=1, le=86_400, validation_alias=env("FATHOM_STALE_RUN_AFTER")
    )
    max_attempts: int = Field(default=3, ge=1, le=100, validation_alias=env("FATHOM_MAX_ATTEMPTS"))
    lease: float = Field(default=LEASE, ge=1.0, le=600.0, validation_alias=env("FATHOM_LEASE"))
    #: Finished runs (and threads untouched) are pruned after this many days; 0 keeps them.
    run_retention_days: int = Field(
        default=180, ge=0, le=36_500, validation_alias=env("FATHOM_RUN_RETENTION_DAYS")
    )
    delivery_attempts: int = Field(
        default=8, ge=1, le=100, validation_alias=env("FATHOM_DELIVERY_ATTEMPTS")
    )
    delivery_backoff: float = Field(
        default=5.0, gt=0, le=3600, validation_alias=env("FATHOM_DELIVERY_BACKOFF")
    )

    # Scheduled digests
    digest_min_interval: float = Field(
        default=3600.0, ge=60, validation_alias=env("FATHOM_DIGEST_MIN_INTERVAL")
    )
    digest_grace: float = Field(default=3600.0, ge=0, validation_alias=env("FATHOM_DIGEST_GRACE"))
    max_digests_per_channel: int = Field(
        default=10, ge=1, le=1000, validation_alias=env("FATHOM_MAX_DIGESTS_PER_CHANNEL")
    )

    # The timezone of today's date in the prompts and reports (a digest's firing: its own)
    timezone: str = Field(default="UTC", validation_alias=env("FATHOM_TIMEZONE"))

    # Logging
    log_format: Literal["console", "json"] = Field(
        default="console", validation_alias=env("FATHOM_LOG_FORMAT")
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", validation_alias=env("FATHOM_LOG_LEVEL")
    )

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        return check_url(value)

    @field_validator("openai_base_url", "writer_base_url", "verifier_base_url", mode="before")
    @classmethod
    def _endpoint_url(cls, value: object) -> object:
        """An http(s) URL with a host (blank: the SDK's default)."""
        if not isinstance(value, str):
            return value
        text = value.strip()
        if not text:
            return None
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL; e.g. https://api.openai.com/v1")
        if parts.query:
            raise ValueError(
                "a base URL takes no query (the client appends /chat/completions to its "
                "path); for Azure OpenAI use https://RESOURCE.openai.azure.com/openai/v1/ "
                "with the deployment name as the model (docs/configuration.md)"
            )
        return text

    @field_validator("search_cache_ttl", "page_cache_ttl", mode="before")
    @classmethod
    def _parse_ttl(cls, value: object) -> object:
        """Accept seconds (``3600``) or a unit suffix (``30m``, ``24h``, ``7d``)."""
        parsed = parse_duration(value) if isinstance(value, str) else None
        return value if parsed is None else parsed

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        """An IANA timezone name (``Europe/Berlin``), as zoneinfo knows it."""
        return zone(value).key

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("search", "log_format", "llm_json_mode", "queue", "strategy", mode="before")
    @classmethod
    def _lower(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _depths_consistent(self) -> Settings:
        if self.default_depth > self.max_depth:
            raise ValueError(
                f"FATHOM_DEFAULT_DEPTH ({self.default_depth}) must not exceed "
                f"FATHOM_MAX_DEPTH ({self.max_depth})"
            )
        return self

    # Derived values -------------------------------------------------------
    @property
    def effective_writer_model(self) -> str:
        return self.writer_model or self.planner_model

    @property
    def effective_writer_base_url(self) -> str | None:
        return self.writer_base_url or self.openai_base_url

    @property
    def effective_writer_api_key(self) -> str | None:
        return self.writer_api_key or self.openai_api_key

    @property
    def effective_verifier_model(self) -> str:
        return self.verifier_model or self.planner_model

    @property
    def effective_verifier_base_url(self) -> str | None:
        return self.verifier_base_url or self.openai_base_url

    @property
    def effective_verifier_api_key(self) -> str | None:
        return self.verifier_api_key or self.openai_api_key

    def require_llm(self) -> None:
        """Fail with one clear line when no LLM endpoint is configured."""
        if not self.openai_api_key:
            raise ConfigError(
                "OPENAI_API_KEY is not set: export OPENAI_API_KEY=<key> (and OPENAI_BASE_URL="
                "<url> for any OpenAI-compatible endpoint), or put them in .env"
            )

    def require_search(self) -> None:
        """Fail with one clear line when the chosen search provider lacks its settings."""
        needs = {
            "searxng": ("SEARXNG_URL", self.searxng_url),
            "tavily": ("TAVILY_API_KEY", self.tavily_api_key),
            "brave": ("BRAVE_API_KEY", self.brave_api_key),
        }
        if self.search in needs:
            name, value = needs[self.search]
            if not value:
                raise ConfigError(f"{name} is not set: FATHOM_SEARCH={self.search} needs it")


def load_settings(**overrides: object) -> Settings:
    """Core's settings, or :class:`ConfigError` with one readable line."""
    return load(Settings, **overrides)
