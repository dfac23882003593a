"""Fetching a result page safely: public http(s) addresses only, robots.txt respected, bounded
in time, size, redirects and content type.

Every address a fetch touches (the page's, each redirect's, robots.txt's) is resolved and
refused when any of its IPs is private, loopback, link-local, multicast, reserved or
unspecified. ``allow_loopback`` (``FATHOM_ALLOW_PRIVATE_FETCH=1``, for tests against local
servers) lets loopback addresses through; the other internal ranges stay refused.
Redirects are followed here, one checked hop at a time, never by the HTTP client.

The address that was checked is the one connected to: a plain-http request goes to the checked
IP (with the site's name in ``Host``), so a name that resolves to a public address for the check
and to an internal one a moment later (DNS rebinding) cannot redirect the fetch. An https
request goes by name, because the certificate must match that name and no internal service
holds a certificate for a public site's name.

A refusal or a failure is a :class:`PageSkipped` with a short reason that is safe to show in
"Notes on this run"; a run never fails because of a page.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit
from urllib.robotparser import RobotFileParser

import httpx

USER_AGENT = "FathomBot/0.1 (research assistant; reads the result pages of a user's research)"
ROBOTS_AGENT = "FathomBot"
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
#: robots.txt files are kept this long per host (seconds).
ROBOTS_TTL = 3600.0
ROBOTS_MAX_BYTES = 256 * 1024
#: Beyond this many hosts, expired robots.txt entries are forgotten.
ROBOTS_KEPT = 2000


_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,40}/[a-z0-9][a-z0-9.+-]{0,60}")


class PageSkipped(Exception):
    """The page was not read; ``reason`` is short and safe to show."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


@dataclass(frozen=True)
class FetchedPage:
    url: str  # as asked
    final_url: str  # after redirects
    content_type: str
    body: str
    truncated: bool


Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address of ``host`` (an IP literal is its own address)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _internal(address: str, *, allow_loopback: bool = False) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if allow_loopback and ip.is_loopback:
        return False
    return bool(
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or not ip.is_global
    )


class PageFetcher:
    """Fetches pages for every run of the process (``max_concurrent`` at once in all)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        *,
        timeout: float = 8.0,
        max_bytes: int = 2 * 1024 * 1024,
        max_redirects: int = 5,
        max_concurrent: int = 20,
        allow_loopback: bool = False,
        resolve: Resolver | None = None,
    ) -> None:
        """``resolve`` answers a host's addresses (default: the system resolver)."""
        self._http = http
        self._resolve = resolve or system_resolve
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._max_redirects = max_redirects
        self._slots = asyncio.Semaphore(max_concurrent)
        self._allow_loopback = allow_loopback
        self._robots: dict[str, tuple[float, RobotFileParser | None]] = {}
        self._robots_locks: dict[str, asyncio.Lock] = {}

    async def fetch(self, url: str) -> FetchedPage:
        """The page at ``url`` (text only); :class:`PageSkipped` saying why not."""
        async with self._slots:
            try:
                return await asyncio.wait_for(self._fetch(url), self._timeout)
            except TimeoutError:
                raise PageSkipped(url, f"no answer within {self._timeout:g} s") from None
            except httpx.HTTPError as exc:
                raise PageSkipped(url, f"unreachable ({type(exc).__name__})") from None

    async def _fetch(self, url: str) -> FetchedPage:
        current = url
        for _ in range(self._max_redirects + 1):
            address = await self._check_address(url, current)
            if not await self._allowed_by_robots(url, current):
                raise PageSkipped(url, "disallowed by the site's robots.txt")
            response = await self._send(current, address, "text/html, text/plain")
            try:
                if response.is_redirect and "location" in response.headers:
                    current = urljoin(current, response.headers["location"])
                    continue
                if response.status_code >= 400:
                    raise PageSkipped(url, f"HTTP {response.status_code}")
                kind = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
                if kind not in TEXT_TYPES:
                    # The type is the server's text: shown only when it looks like a type.
                    shown = kind if _MEDIA_TYPE.fullmatch(kind) else "an unknown content type"
                    raise PageSkipped(url, f"not a text page ({shown})")
                body, truncated = await self._read(response, self._max_bytes)
            finally:
                await response.aclose()
            charset = response.charset_encoding or "utf-8"
            text = body.decode(charset, errors="replace")
            return FetchedPage(url, current, kind, text, truncated)
        raise PageSkipped(url, f"more than {self._max_redirects} redirects")

    async def _read(self, response: httpx.Response, limit: int) -> tuple[bytes, bool]:
        """The body, at most ``limit`` bytes (and whether it was cut)."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= limit:
                return b"".join(chunks)[:limit], True
        return b"".join(chunks), False

    async def _send(self, url: str, address: str, accept: str) -> httpx.Response:
        """GET ``url`` (streamed, no redirects followed); plain http goes to the checked
        ``address`` itself (see the module)."""
        parts = urlsplit(url)
        headers = {"User-Agent": USER_AGENT, "Accept": accept}
        target = url
        if parts.scheme == "http":
            host = f"[{address}]" if ":" in address else address
            netloc = f"{host}:{parts.port}" if parts.port else host
            target = urlunsplit(parts._replace(netloc=netloc))
            headers["Host"] = parts.netloc.rsplit("@", 1)[-1]
        request = self._http.build_request("GET", target, headers=headers)
        return await self._http.send(request, stream=True, follow_redirects=False)

    async def _check_address(self, asked: str, url: str) -> str:
        """The address to connect to for ``url``; :class:`PageSkipped` when any address of its
        host is internal."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise PageSkipped(asked, "only public http and https addresses are read")
        if parts.username is not None or parts.password is not None:
            raise PageSkipped(asked, "addresses with credentials are not read")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            addresses = await self._resolve(parts.hostname, port)
        except OSError:
            raise PageSkipped(asked, "its address does not resolve") from None
        loopback = self._allow_loopback
        if not addresses or any(_internal(a, allow_loopback=loopback) for a in addresses):
            raise PageSkipped(asked, "it points to a private or internal address")
        return addresses[0].split("%", 1)[0]

    async def _allowed_by_robots(self, asked: str, url: str) -> bool:
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.netloc}"
        if len(self._robots) > ROBOTS_KEPT:
            self._forget_expired_robots()
        lock = self._robots_locks.setdefault(origin, asyncio.Lock())
        async with lock:
            cached = self._robots.get(origin)
            if cached is None or time.monotonic() - cached[0] > ROBOTS_TTL:
                cached = (time.monotonic(), await self._load_robots(asked, origin))
                self._robots[origin] = cached
        parser = cached[1]
        return True if parser is None else parser.can_fetch(ROBOTS_AGENT, url)

    def _forget_expired_robots(self) -> None:
        """Keep the per-host memory of a long-running process bounded."""
        now = time.monotonic()
        for origin, (loaded, _) in list(self._robots.items()):
            lock = self._robots_locks.get(origin)
            if now - loaded > ROBOTS_TTL and (lock is None or not lock.locked()):
                del self._robots[origin]
                self._robots_locks.pop(origin, None)

    async def _load_robots(self, asked: str, origin: str) -> RobotFileParser | None:
        """The site's rules (None: no robots.txt, everything allowed). A server error or an
        unreachable robots.txt disallows the whole site for now (RFC 9309)."""
        robots_url = f"{origin}/robots.txt"
        address = await self._check_address(asked, robots_url)
        parser = RobotFileParser(robots_url)
        try:
            response = await self._send(robots_url, address, "text/plain")
            try:
                if response.status_code >= 500:
                    parser.parse(["User-agent: *", "Disallow: /"])
                    return parser
                if response.status_code >= 400 or response.is_redirect:
                    return None
                body, _ = await self._read(response, ROBOTS_MAX_BYTES)
            finally:
                await response.aclose()
        except httpx.HTTPError:
            parser.parse(["User-agent: *", "Disallow: /"])
            return parser
        parser.parse(body.decode("utf-8", "replace").splitlines())
        return parser
