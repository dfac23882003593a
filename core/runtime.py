"""Core's half of the composition root: settings in, storage, clients and services out.

The database, its stores, the HTTP and model clients, the search provider, the page reader
and the services are built here, once per process, injected everywhere and closed together:
``fathom research`` and the ``thread``/``digest`` commands call :func:`open_runtime` or
:func:`open_storage` directly; ``fathom serve`` and ``fathom worker`` through
``bots.composition.open_app``, which adds the job, its runner and the chat platforms. The
team's internal sources (``FATHOM_MCP_CONFIG``, :mod:`core.knowledge`) are built here too:
started with the runtime (their servers connect in the background) and closed last.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING, Any

import certifi
import httpx
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from core.config import ConfigError, EnvSettings
from core.documents import DocumentExtractor
from core.engine.budget import RunBudget
from core.engine.files import FileReader
from core.engine.registry import load_strategy_settings
from core.llm import LLMClients
from core.operations.digests import DigestService
from core.operations.queue import queue_in_transaction
from core.pages.fetch import PageFetcher
from core.pages.reader import PageCache, PageReader
from core.research.cost import Prices
from core.research.lease import LeaseTiming
from core.research.policy import Reading, RunPolicy
from core.research.requests import UserQuota
from core.research.service import Research
from core.search import SearchProvider, build_search_provider
from core.settings import Settings
from storage import Database, DigestStore, SchemaError, StorageUnavailable, Store
from storage.db import connection_problem, masked_url

if TYPE_CHECKING:
    from core.knowledge import Knowledge
    from core.metrics import Metrics

log = logging.getLogger(__name__)


class DeferredTrustContext(ssl.SSLContext):
    """A verifying TLS client context that loads its CA certificates at the first handshake.

    Loading a CA bundle costs 20-40 ms, and httpx and the openai SDK each load one per client
    they build, also for ``http://`` URLs. One shared context of this class costs about
    0.2 ms to build and loads the certificates once, only when a TLS connection is made; a
    process that talks only to ``http://`` endpoints (local models, the test fakes) never
    loads them. Trusted: ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` when set (as httpx and the
    SDK honour them), else the system store (the SDK's default on Linux) plus certifi's
    bundle (httpx's default), so every endpoint either client trusted alone still works.
    """

    def __new__(cls) -> DeferredTrustContext:
        return super().__new__(cls, ssl.PROTOCOL_TLS_CLIENT)  # hostname check + CERT_REQUIRED

    def __init__(self) -> None:
        super().__init__()
        self._trust_lock = threading.Lock()  # handshakes may start in worker threads (anyio)
        self._trust_loaded = False

    def load_trust(self) -> None:
        """Load the CA certificates now (idempotent, thread-safe)."""
        with self._trust_lock:
            if self._trust_loaded:
                return
            if cafile := os.environ.get("SSL_CERT_FILE"):
                self.load_verify_locations(cafile=cafile)
            elif capath := os.environ.get("SSL_CERT_DIR"):
                self.load_verify_locations(capath=capath)
            else:
                self.load_default_certs()
                self.load_verify_locations(cafile=certifi.where())
            self._trust_loaded = True

    def wrap_bio(self, *args: Any, **kwargs: Any) -> ssl.SSLObject:
        self.load_trust()
        return super().wrap_bio(*args, **kwargs)

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        self.load_trust()
        return super().wrap_socket(*args, **kwargs)


def new_run_hook(settings: Settings) -> Callable[[Connection, str], None] | None:
    """What the store does in the transaction that creates a run: queue it, with
    ``FATHOM_QUEUE=procrastinate``."""
    if settings.queue != "procrastinate":
        return None
    return queue_in_transaction


def page_client(settings: Settings, tls: ssl.SSLContext) -> httpx.AsyncClient:
    """The HTTP client of page reading: its own connections (a slow site never holds up a
    search), none kept between requests (the fetcher connects to checked IPs, and a pooled
    connection is keyed by IP, not by name), no redirects followed by the client (the fetcher
    checks each hop), no proxy from the environment (a proxy would resolve names itself, past
    the checks) and no cookies kept (nothing a site sets follows the bot to another)."""
    return httpx.AsyncClient(
        timeout=settings.page_timeout,
        follow_redirects=False,
        verify=tls,
        trust_env=False,
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        limits=httpx.Limits(max_connections=settings.page_fetches, max_keepalive_connections=0),
    )


def document_extractor(settings: Settings) -> DocumentExtractor:
    """Documents' text within the settings' limits (``FATHOM_PDF_MAX_PAGES``,
    ``FATHOM_PDF_TIMEOUT``); its worker processes start with the first PDF or DOCX."""
    return DocumentExtractor(max_pages=settings.pdf_max_pages, timeout=settings.pdf_timeout)


def page_reader(
    settings: Settings,
    http: httpx.AsyncClient,
    cache: PageCache,
    documents: DocumentExtractor | None = None,
    metrics: Metrics | None = None,
) -> PageReader | None:
    """The reader of result pages (None when ``FATHOM_READ_PAGES=0``); it reads PDF results
    with ``documents`` (default: :func:`document_extractor`) and closes it."""
    if settings.read_pages <= 0:
        return None
    fetcher = PageFetcher(
        http,
        timeout=settings.page_timeout,
        max_bytes=settings.page_max_bytes,
        max_concurrent=settings.page_fetches,
        allow_loopback=settings.allow_private_fetch,
    )
    return PageReader(
        fetcher,
        pages=settings.read_pages,
        budget_tokens=settings.page_tokens,
        cache=cache,
        cache_ttl=settings.page_cache_ttl,
        extract_timeout=settings.page_timeout,
        documents=documents or document_extractor(settings),
        metrics=metrics,
    )


@dataclass
class Runtime:
    settings: Settings
    database: Database
    store: Store
    research: Research
    search: SearchProvider
    llm: LLMClients
    digests: DigestService
    #: Reads the result pages of every search (None: ``FATHOM_READ_PAGES=0``).
    reader: PageReader | None
    #: The team's internal sources, started (None: ``FATHOM_MCP_CONFIG`` is not set).
    knowledge: Knowledge | None = None


def knowledge_from_settings(settings: Settings, metrics: Metrics | None = None) -> Knowledge | None:
    """The internal sources ``FATHOM_MCP_CONFIG`` names, built but not started (nothing
    connects yet); None when it is not set (and :mod:`core.knowledge` is not even imported).
    ``ConfigError`` (one line) when the file cannot be read or is not an ``mcpServers``
    object; a single bad server is not an error: it is down, with its problem."""
    if not settings.mcp_config:
        return None
    from core.knowledge import Knowledge

    knowledge: Knowledge | None = Knowledge.from_settings(settings, metrics)
    return knowledge


def unreachable_database(url: str, error: BaseException) -> ConfigError:
    """One line naming the database (password masked) and why it could not be used."""
    reason = connection_problem(error)
    return ConfigError(f"DATABASE_URL {masked_url(url)}: cannot connect: {reason}")


async def reach_database(database: Database, *, upgrade: bool) -> None:
    """Connect once, and bring the schema to head when ``upgrade``; ``ConfigError`` (one line)
    when the database cannot be reached (a closed port, a missing database, a bad password,
    an SQLite file that cannot be opened)."""
    try:
        if upgrade:
            await database.ensure_schema()
        else:
            await database.schema()
    except (StorageUnavailable, DBAPIError) as exc:
        raise unreachable_database(database.url, exc) from None
    except SchemaError as exc:
        raise ConfigError(f"DATABASE_URL {masked_url(database.url)}: {exc}") from None


#: How often a process started without migrating looks whether the schema is usable yet.
SCHEMA_POLL_SECONDS = 2.0


async def wait_for_schema(database: Database, *, every: float = SCHEMA_POLL_SECONDS) -> None:
    """Return once this release's code can run on the database's schema (its own or a newer
    release's): a process started with ``--no-upgrade`` before the migration (the first
    ``kubectl apply -k``, where the migration and the pods start together) waits here, says
    why once, and goes on when ``fathom db upgrade`` has run, with no restart."""
    said = None
    while True:
        try:
            schema = await database.schema()
        except Exception as exc:  # the database is away for now: keep looking
            why = f"the database cannot be read ({type(exc).__name__})"
        else:
            if schema.state.usable:
                if said is not None:
                    log.info("%s: starting", schema.describe())
                return
            why = schema.describe()
        if why != said:
            log.error("waiting for the database schema: %s", why)
            said = why
        await asyncio.sleep(every)


@asynccontextmanager
async def open_database(settings: Settings, *, upgrade: bool = True) -> AsyncIterator[Database]:
    """The database, reached, with its schema brought to head (cheap when already current);
    ``ConfigError`` when it cannot be reached.

    ``upgrade=False`` leaves the schema alone (``fathom serve --no-upgrade``, when
    migrations run as a separate deploy step).
    """
    database = Database(settings.database_url)
    try:
        await reach_database(database, upgrade=upgrade)
        yield database
    finally:
        await database.dispose()


async def check_database(settings: Settings) -> None:
    """Connect to ``DATABASE_URL`` once (what ``fathom serve`` checks before it binds its
    port); ``ConfigError`` naming the problem."""
    async with open_database(settings, upgrade=False):
        pass


@dataclass(frozen=True)
class Storage:
    """The database and the stores on it, built once per process (here, nowhere else)."""

    database: Database
    store: Store
    digests: DigestStore


@asynccontextmanager
async def open_storage(settings: Settings, *, upgrade: bool = True) -> AsyncIterator[Storage]:
    """The database (reached, its schema brought to head unless ``upgrade=False``) and its
    stores. A new run is queued in its creating transaction with ``FATHOM_QUEUE=procrastinate``
    (so a run created by ``fathom digest run`` is queued like any other)."""
    async with open_database(settings, upgrade=upgrade) as database:
        store = Store(database, on_new_run=new_run_hook(settings))
        yield Storage(database, store, store.digests)


def digest_service(settings: Settings, storage: Storage) -> DigestService:
    """Schedules: adding, listing and firing only touch the database (no LLM or search)."""
    return DigestService(
        storage.digests,
        storage.store.runs,
        min_interval=settings.digest_min_interval,
        grace=settings.digest_grace,
        max_per_channel=settings.max_digests_per_channel,
    )


@asynccontextmanager
async def open_runtime(
    settings: Settings, *, upgrade: bool = True, metrics: Metrics | None = None
) -> AsyncIterator[Runtime]:
    """Everything a research needs; raises ``ConfigError`` before touching anything.
    ``metrics``: where the clients and the service count their work (``fathom serve``)."""
    settings.require_llm()
    settings.require_search()
    strategies = load_strategy_settings()
    knowledge = knowledge_from_settings(settings, metrics)
    if knowledge is not None:
        knowledge.start()  # its servers connect in the background while the rest is built
    try:
        async with _runtime(
            settings, strategies, upgrade=upgrade, metrics=metrics, knowledge=knowledge
        ) as rt:
            yield rt
    finally:
        if knowledge is not None:
            await knowledge.aclose()


@asynccontextmanager
async def _runtime(
    settings: Settings,
    strategies: Mapping[str, EnvSettings],
    *,
    upgrade: bool,
    metrics: Metrics | None,
    knowledge: Knowledge | None,
) -> AsyncIterator[Runtime]:
    tls = DeferredTrustContext()  # one for every client of the process
    async with (
        open_storage(settings, upgrade=upgrade) as storage,
        httpx.AsyncClient(
            timeout=settings.search_timeout,
            headers={"User-Agent": "fathom-bot/0.1"},
            follow_redirects=True,
            verify=tls,
        ) as http,
        page_client(settings, tls) as pages_http,
    ):
        database, store = storage.database, storage.store
        search = build_search_provider(settings, http, store.caches, metrics)
        llm = LLMClients.from_settings(settings, ssl_context=tls, metrics=metrics)
        # One extractor (its worker processes) for result pages and attached files.
        documents = document_extractor(settings)
        reader = page_reader(settings, pages_http, store.caches, documents, metrics)
        files = FileReader(documents, max_bytes=settings.attachment_max_bytes)
        try:
            policy = RunPolicy(
                timing=LeaseTiming(settings.stale_run_after),
                max_attempts=settings.max_attempts,
                budget=RunBudget(settings.max_run_tokens, settings.max_run_seconds),
                quota=UserQuota(settings.user_daily_runs, settings.user_daily_tokens),
                timezone=settings.timezone,
                prices=Prices.parse(settings.prices) if settings.prices else None,
                verify_seconds=settings.verify_seconds,
            )
            research = Research(
                store=store,
                planner=llm.planner,
                writer=llm.writer,
                verifier=llm.verifier if settings.verify_claims else None,
                search=search,
                reading=Reading(reader, files, knowledge),
                strategy_settings=strategies,
                policy=policy,
                metrics=metrics,
            )
            digests = digest_service(settings, storage)
            yield Runtime(
                settings, database, store, research, search, llm, digests, reader, knowledge
            )
        finally:
            await llm.aclose()
            if reader is not None:
                await reader.aclose()
            await documents.aclose()  # (the reader closed it already, if there is one)
