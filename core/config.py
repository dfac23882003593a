"""Configuration from the environment and ``.env`` (names fixed by DESIGN.md).

``load_settings()`` turns every validation problem into one :class:`ConfigError`
whose message names the variable and what is expected, so the CLI can print a
single clear line instead of a traceback.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from core.models import Strategy

SearchProviderName = Literal["ddgs", "searxng", "tavily", "brave"]
#: A comma-separated list in the environment (``U1,U2``), a list in code.
CommaList = Annotated[list[str], NoDecode]


#: The chat platforms Fathom serves, by the name that starts their thread keys, with the name
#: people know them by. Only these can ever receive a run's report.
CHAT_PLATFORMS: dict[str, str] = {"slack": "Slack", "feishu": "Feishu/Lark", "dingtalk": "DingTalk"}
#: Variables whose given value is never repeated in an error (it may hold a password).
_UNECHOED = frozenset({"DATABASE_URL"})


class ConfigError(Exception):
    """A setting is missing or invalid; the message is meant for the operator."""


def _env(name: str) -> AliasChoices:
    return AliasChoices(name, name.lower())


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        populate_by_name=False,
    )

    database_url: str = Field(
        default="sqlite+aiosqlite:///fathom.db", validation_alias=_env("DATABASE_URL")
    )

    # LLM endpoints
    openai_api_key: str | None = Field(default=None, validation_alias=_env("OPENAI_API_KEY"))
    openai_base_url: str | None = Field(default=None, validation_alias=_env("OPENAI_BASE_URL"))
    planner_model: str = Field(default="gpt-4o", validation_alias=_env("FATHOM_PLANNER_MODEL"))
    writer_model: str | None = Field(default=None, validation_alias=_env("FATHOM_WRITER_MODEL"))
    writer_base_url: str | None = Field(
        default=None, validation_alias=_env("FATHOM_WRITER_BASE_URL")
    )
    writer_api_key: str | None = Field(default=None, validation_alias=_env("FATHOM_WRITER_API_KEY"))
    llm_json_mode: Literal["auto", "json_schema", "json_object", "prompt"] = Field(
        default="auto", validation_alias=_env("FATHOM_LLM_JSON_MODE")
    )
    llm_timeout: float = Field(default=120.0, gt=0, validation_alias=_env("FATHOM_LLM_TIMEOUT"))
    llm_max_retries: int = Field(
        default=3, ge=0, le=10, validation_alias=_env("FATHOM_LLM_MAX_RETRIES")
    )

    # Search
    search: SearchProviderName = Field(default="ddgs", validation_alias=_env("FATHOM_SEARCH"))
    searxng_url: str | None = Field(default=None, validation_alias=_env("SEARXNG_URL"))
    tavily_api_key: str | None = Field(default=None, validation_alias=_env("TAVILY_API_KEY"))
    tavily_base_url: str = Field(
        default="https://api.tavily.com", validation_alias=_env("TAVILY_BASE_URL")
    )
    brave_api_key: str | None = Field(default=None, validation_alias=_env("BRAVE_API_KEY"))
    brave_base_url: str = Field(
        default="https://api.search.brave.com/res/v1", validation_alias=_env("BRAVE_BASE_URL")
    )
    search_max_results: int = Field(
        default=8, ge=1, le=50, validation_alias=_env("FATHOM_SEARCH_MAX_RESULTS")
    )
    search_timeout: float = Field(
        default=20.0, gt=0, validation_alias=_env("FATHOM_SEARCH_TIMEOUT")
    )
    search_cache_ttl: timedelta = Field(
        default=timedelta(hours=24), validation_alias=_env("FATHOM_SEARCH_CACHE_TTL")
    )

    # Reading result pages
    read_pages: int = Field(default=3, ge=0, le=10, validation_alias=_env("FATHOM_READ_PAGES"))
    page_tokens: int = Field(
        default=1500, ge=100, le=20000, validation_alias=_env("FATHOM_PAGE_TOKENS")
    )
    page_timeout: float = Field(
        default=8.0, gt=0, le=120, validation_alias=_env("FATHOM_PAGE_TIMEOUT")
    )
    page_max_bytes: int = Field(
        default=2 * 1024 * 1024,
        ge=16 * 1024,
        le=50 * 1024 * 1024,
        validation_alias=_env("FATHOM_PAGE_MAX_BYTES"),
    )
    page_fetches: int = Field(
        default=20, ge=1, le=500, validation_alias=_env("FATHOM_PAGE_FETCHES")
    )
    page_cache_ttl: timedelta = Field(
        default=timedelta(hours=24), validation_alias=_env("FATHOM_PAGE_CACHE_TTL")
    )
    allow_private_fetch: bool = Field(
        default=False, validation_alias=_env("FATHOM_ALLOW_PRIVATE_FETCH")
    )

    # Limits
    default_depth: int = Field(default=3, ge=1, validation_alias=_env("FATHOM_DEFAULT_DEPTH"))
    max_depth: int = Field(default=10, ge=1, le=50, validation_alias=_env("FATHOM_MAX_DEPTH"))
    max_parallel_searches: int = Field(
        default=10, ge=1, le=10, validation_alias=_env("FATHOM_MAX_PARALLEL_SEARCHES")
    )
    max_process_searches: int = Field(
        default=100, ge=1, le=1000, validation_alias=_env("FATHOM_MAX_PROCESS_SEARCHES")
    )
    strategy: Strategy = Field(default=Strategy.ITERATIVE, validation_alias=_env("FATHOM_STRATEGY"))
    graph_max_nodes: int = Field(
        default=12, ge=1, le=50, validation_alias=_env("FATHOM_GRAPH_MAX_NODES")
    )

    # Access and fairness
    allowed_users: CommaList = Field(
        default_factory=list, validation_alias=_env("FATHOM_ALLOWED_USERS")
    )
    allowed_channels: CommaList = Field(
        default_factory=list, validation_alias=_env("FATHOM_ALLOWED_CHANNELS")
    )
    admins: CommaList = Field(default_factory=list, validation_alias=_env("FATHOM_ADMINS"))
    user_concurrency: int = Field(
        default=2, ge=1, le=100, validation_alias=_env("FATHOM_USER_CONCURRENCY")
    )

    # Jobs
    queue: Literal["local", "procrastinate"] = Field(
        default="local", validation_alias=_env("FATHOM_QUEUE")
    )
    max_concurrent_runs: int = Field(
        default=100, ge=1, le=10_000, validation_alias=_env("FATHOM_MAX_CONCURRENT_RUNS")
    )
    stale_run_after: float = Field(
        default=180.0, ge=1, le=86_400, validation_alias=_env("FATHOM_STALE_RUN_AFTER")
    )
    max_attempts: int = Field(default=3, ge=1, le=100, validation_alias=_env("FATHOM_MAX_ATTEMPTS"))
    lease: float = Field(default=45.0, ge=1.0, le=600.0, validation_alias=_env("FATHOM_LEASE"))
    delivery_attempts: int = Field(
        default=8, ge=1, le=100, validation_alias=_env("FATHOM_DELIVERY_ATTEMPTS")
    )
    delivery_backoff: float = Field(
        default=5.0, gt=0, le=3600, validation_alias=_env("FATHOM_DELIVERY_BACKOFF")
    )

    # HTTP routes
    max_body_bytes: int = Field(
        default=1_048_576,
        ge=1024,
        le=64 * 1_048_576,
        validation_alias=_env("FATHOM_MAX_BODY_BYTES"),
    )
    #: Seconds a platform route waits for a request's whole body (then 408).
    body_timeout: float = Field(
        default=10.0, gt=0, le=300, validation_alias=_env("FATHOM_BODY_TIMEOUT")
    )

    # Slack
    slack_bot_token: str | None = Field(default=None, validation_alias=_env("SLACK_BOT_TOKEN"))
    slack_signing_secret: str | None = Field(
        default=None, validation_alias=_env("SLACK_SIGNING_SECRET")
    )
    slack_app_token: str | None = Field(default=None, validation_alias=_env("SLACK_APP_TOKEN"))
    slack_api_url: str = Field(
        default="https://slack.com/api/", validation_alias=_env("SLACK_API_URL")
    )
    slack_client_id: str | None = Field(default=None, validation_alias=_env("SLACK_CLIENT_ID"))
    slack_client_secret: str | None = Field(
        default=None, validation_alias=_env("SLACK_CLIENT_SECRET")
    )
    slack_edit_interval: float = Field(
        default=1.0, ge=0, le=60, validation_alias=_env("FATHOM_SLACK_EDIT_INTERVAL")
    )

    # Scheduled digests
    digest_min_interval: float = Field(
        default=3600.0, ge=60, validation_alias=_env("FATHOM_DIGEST_MIN_INTERVAL")
    )
    digest_grace: float = Field(default=3600.0, ge=0, validation_alias=_env("FATHOM_DIGEST_GRACE"))
    max_digests_per_channel: int = Field(
        default=10, ge=1, le=1000, validation_alias=_env("FATHOM_MAX_DIGESTS_PER_CHANNEL")
    )

    # Feishu / Lark
    feishu_app_id: str | None = Field(default=None, validation_alias=_env("FEISHU_APP_ID"))
    feishu_app_secret: str | None = Field(default=None, validation_alias=_env("FEISHU_APP_SECRET"))
    feishu_verification_token: str | None = Field(
        default=None, validation_alias=_env("FEISHU_VERIFICATION_TOKEN")
    )
    feishu_encrypt_key: str | None = Field(
        default=None, validation_alias=_env("FEISHU_ENCRYPT_KEY")
    )
    feishu_domain: str = Field(
        default="https://open.feishu.cn", validation_alias=_env("FEISHU_DOMAIN")
    )
    feishu_mode: Literal["ws", "webhook"] = Field(
        default="ws", validation_alias=_env("FEISHU_MODE")
    )
    feishu_edit_interval: float = Field(
        default=1.0, ge=0, le=60, validation_alias=_env("FATHOM_FEISHU_EDIT_INTERVAL")
    )

    # DingTalk
    dingtalk_client_id: str | None = Field(
        default=None, validation_alias=_env("DINGTALK_CLIENT_ID")
    )
    dingtalk_client_secret: str | None = Field(
        default=None, validation_alias=_env("DINGTALK_CLIENT_SECRET")
    )
    dingtalk_mode: Literal["stream", "http"] = Field(
        default="stream", validation_alias=_env("DINGTALK_MODE")
    )
    dingtalk_api_url: str = Field(
        default="https://api.dingtalk.com", validation_alias=_env("DINGTALK_API_URL")
    )
    dingtalk_robot_code: str | None = Field(
        default=None, validation_alias=_env("DINGTALK_ROBOT_CODE")
    )
    dingtalk_card_template_id: str | None = Field(
        default=None, validation_alias=_env("DINGTALK_CARD_TEMPLATE_ID")
    )
    dingtalk_edit_interval: float = Field(
        default=1.0, ge=0, le=60, validation_alias=_env("FATHOM_DINGTALK_EDIT_INTERVAL")
    )
    dingtalk_followup_window: float = Field(
        default=600.0, ge=0, le=86_400, validation_alias=_env("FATHOM_DINGTALK_FOLLOWUP_WINDOW")
    )

    # Logging
    log_format: Literal["console", "json"] = Field(
        default="console", validation_alias=_env("FATHOM_LOG_FORMAT")
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", validation_alias=_env("FATHOM_LOG_LEVEL")
    )

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        from storage.db import check_url

        return check_url(value)

    @field_validator("openai_base_url", "writer_base_url", mode="before")
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
        return text

    @field_validator("search_cache_ttl", "page_cache_ttl", mode="before")
    @classmethod
    def _parse_ttl(cls, value: object) -> object:
        """Accept seconds (``3600``) or a unit suffix (``30m``, ``24h``, ``7d``)."""
        if isinstance(value, str):
            text = value.strip().lower()
            units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
            if text and text[-1] in units and text[:-1].strip().replace(".", "", 1).isdigit():
                return timedelta(seconds=float(text[:-1]) * units[text[-1]])
            if text.replace(".", "", 1).isdigit():
                return timedelta(seconds=float(text))
        return value

    @field_validator("allowed_users", "allowed_channels", "admins", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("feishu_domain", mode="before")
    @classmethod
    def _feishu_domain(cls, value: object) -> object:
        """``feishu`` and ``lark`` name the two public endpoints; otherwise an origin
        (``https://host[:port]``, no path: the SDK refuses anything else at start-up)."""
        if isinstance(value, str):
            named = {"feishu": "https://open.feishu.cn", "lark": "https://open.larksuite.com"}
            value = named.get(value.strip().lower(), value.strip()).rstrip("/")
            parts = urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    "not feishu, lark or an http(s) origin like https://open.feishu.cn"
                )
            if parts.path or parts.query or parts.fragment:
                raise ValueError(
                    "an origin without a path (scheme and host only), e.g. https://open.feishu.cn"
                )
        return value

    @field_validator("dingtalk_mode", mode="before")
    @classmethod
    def _dingtalk_mode(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("dingtalk_api_url")
    @classmethod
    def _no_trailing_slash(cls, value: str) -> str:
        value = value.strip().rstrip("/")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL; e.g. https://api.dingtalk.com")
        return value

    @field_validator("feishu_mode", mode="before")
    @classmethod
    def _feishu_mode(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("slack_api_url")
    @classmethod
    def _slash_terminated(cls, value: str) -> str:
        parts = urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("not an http(s) URL; e.g. https://slack.com/api/")
        value = value.strip()
        return value if value.endswith("/") else value + "/"

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

    def require_llm(self) -> None:
        """Fail with one clear line when no LLM endpoint is configured."""
        if not self.openai_api_key:
            raise ConfigError(
                "OPENAI_API_KEY is not set: export OPENAI_API_KEY=<key> (and OPENAI_BASE_URL="
                "<url> for any OpenAI-compatible endpoint), or put them in .env"
            )

    @property
    def chat_platforms(self) -> frozenset[str]:
        """The chat platforms whose credentials are set (what ``fathom serve`` connects to)."""
        enabled = {
            "slack": self.slack_enabled,
            "feishu": self.feishu_enabled,
            "dingtalk": self.dingtalk_enabled,
        }
        return frozenset(name for name, on in enabled.items() if on)

    @property
    def slack_enabled(self) -> bool:
        """Slack is on when a token (single workspace) or OAuth client is configured."""
        return bool(self.slack_bot_token or (self.slack_client_id and self.slack_client_secret))

    @property
    def slack_oauth(self) -> bool:
        return bool(self.slack_client_id and self.slack_client_secret)

    def require_slack(self) -> None:
        """Fail with one clear line when Slack is half-configured."""
        if self.slack_app_token:
            if not self.slack_app_token.startswith("xapp-"):
                raise ConfigError("SLACK_APP_TOKEN must be an app-level token starting with xapp-")
        elif not self.slack_signing_secret:
            raise ConfigError(
                "SLACK_SIGNING_SECRET is not set: HTTP mode needs it to verify Slack's requests "
                "(or set SLACK_APP_TOKEN for Socket Mode)"
            )
        if not self.slack_oauth and not self.slack_bot_token:
            raise ConfigError(
                "SLACK_BOT_TOKEN is not set: set it (single workspace) or SLACK_CLIENT_ID and "
                "SLACK_CLIENT_SECRET (multi-workspace OAuth install)"
            )
        if self.slack_client_id and not self.slack_client_secret:
            raise ConfigError("SLACK_CLIENT_SECRET is not set: SLACK_CLIENT_ID needs it")

    @property
    def feishu_enabled(self) -> bool:
        return bool(self.feishu_app_id or self.feishu_app_secret)

    def require_feishu(self) -> None:
        """Fail with one clear line when Feishu/Lark is half-configured."""
        if not self.feishu_app_id or not self.feishu_app_secret:
            raise ConfigError(
                "FEISHU_APP_ID and FEISHU_APP_SECRET must both be set (the app's credentials, "
                "from the developer console)"
            )
        if self.feishu_mode == "webhook" and not (
            self.feishu_verification_token and self.feishu_encrypt_key
        ):
            raise ConfigError(
                "FEISHU_MODE=webhook needs FEISHU_VERIFICATION_TOKEN and FEISHU_ENCRYPT_KEY "
                "(Events and callbacks > Encryption strategy) to verify Feishu's requests"
            )

    @property
    def dingtalk_enabled(self) -> bool:
        return bool(self.dingtalk_client_id or self.dingtalk_client_secret)

    def require_dingtalk(self) -> None:
        """Fail with one clear line when DingTalk is half-configured."""
        if not self.dingtalk_client_id or not self.dingtalk_client_secret:
            raise ConfigError(
                "DINGTALK_CLIENT_ID and DINGTALK_CLIENT_SECRET must both be set (the app's "
                "AppKey and AppSecret, from the developer console)"
            )

    def is_allowed(self, user: str | None, channel: str | None) -> bool:
        """Access control; an empty allow-list admits everyone. Admins are always allowed."""
        if user and user in self.admins:
            return True
        if self.allowed_users and (user is None or user not in self.allowed_users):
            return False
        return not (
            self.allowed_channels and (channel is None or channel not in self.allowed_channels)
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


# Environment variable names per field, for error messages.
def _variable_for(field: str) -> str:
    info = Settings.model_fields.get(field)
    alias = info.validation_alias if info else None
    if isinstance(alias, AliasChoices) and alias.choices:
        first = alias.choices[0]
        return first if isinstance(first, str) else field.upper()
    return field.upper()


def load_settings(**overrides: object) -> Settings:
    """Read the settings, or raise :class:`ConfigError` with one readable line."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = [str(p) for p in error.get("loc", ())]
            name = _variable_for(loc[0]) if loc else "settings"
            value = error.get("input")
            shown = "" if isinstance(value, dict) or name in _UNECHOED else f" (got {value!r})"
            message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
            if not loc:
                problems.append(message)
            else:
                problems.append(f"{name} is invalid{shown}: {message}")
        raise ConfigError("; ".join(problems)) from None
