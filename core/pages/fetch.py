"""Fetching a result page safely: public http(s) addresses only, robots.txt respected, bounded
in time, size, redirects and content type.

Text pages (HTML, plain text) come back as text; PDFs (``application/pdf``, or a generic binary
type for an address whose path ends in ``.pdf``) as bytes, for ``core.documents`` to read. A PDF
cut at the size limit is still handed over: its first pages can often be read.

Every address a fetch touches (the page's, each redirect's, robots.txt's) is resolved and
refused when any of its IPs is private, loopback, link-local, site-local, multicast, reserved,
unspecified or an IPv6 wrapping of one of those. ``allow_loopback``
(``FATHOM_ALLOW_PRIVATE_FETCH=1``, for tests against local servers) lets loopback addresses
through; the other internal ranges stay refused. Redirects are followed here, one checked hop
at a time, never by the HTTP client.

The address that was checked is the one connected to: the request goes to the checked IP, with
the site's name in ``Host`` and, for https, as the TLS server name (so the certificate is
verified for that name). A name that resolves to a public address for the check and to an
internal one a moment later (DNS rebinding) cannot redirect the fetch. The HTTP client must
not reuse connections across requests (``page_client`` keeps none), since a pooled
connection is keyed by the IP, not the name.

The body is decompressed here, chunk by chunk and never beyond the size limit, so a small
compressed answer cannot expand into gigabytes.

A refusal or a failure is a :class:`PageSkipped` with a short reason that is safe to show in
"Notes on this run"; a run never fails because of a page.
"""

from __future__ import annotations

import asyncio
import codecs
import ipaddress
import re
import socket
import time
import zlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urljoin
from urllib.robotparser import RobotFileParser

import httpx

from core.words.reasons import Reason

USER_AGENT = "FathomBot/0.1 (research assistant; reads the result pages of a user's research)"
ROBOTS_AGENT = "FathomBot"
TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
PDF_TYPES = ("application/pdf", "application/x-pdf")
#: Types a server may give a PDF: read as one when the address's path ends in ``.pdf``.
BINARY_TYPES = ("application/octet-stream", "binary/octet-stream")
ACCEPT = "text/html, application/xhtml+xml, text/plain;q=0.9, application/pdf;q=0.8"
#: robots.txt files are kept this long per host (seconds).
ROBOTS_TTL = 3600.0
ROBOTS_MAX_BYTES = 256 * 1024
#: At most this many hosts' robots.txt are remembered (the least recently used go first).
ROBOTS_KEPT = 2000

_MEDIA_TYPE = re.compile(r"[a-z0-9][a-z0-9.+-]{0,40}/[a-z0-9][a-z0-9.+-]{0,60}")
_HOSTNAME = re.compile(r"(?=.{1,253}$)[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_-]+)*\.?")


class PageSkipped(Exception):
    """The page was not read; ``reason`` is short and safe to show."""

    def __init__(self, url: str, reason: Reason) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


NOT_DECOMPRESSED = Reason("compressed in a way that is not read", "压缩方式不受支持")
PRIVATE_ADDRESS = Reason("it points to a private or internal address", "指向私有或内部地址")


def _in_both(en: str, zh: str, detail: str) -> Reason:
    """Our words with outside data (an exception's class, a content type) in parentheses."""
    return Reason(f"{en} ({detail})", f"{zh}（{detail}）")


@dataclass(frozen=True)
class FetchedPage:
    url: str  # as asked
    final_url: str  # after redirects
    content_type: str
    body: str  # a text page's text ("" for a document)
    truncated: bool
    #: A document's bytes (a PDF); None for a text page.
    data: bytes | None = None

    @property
    def is_pdf(self) -> bool:
        return self.data is not None


Resolver = Callable[[str, int], Awaitable[list[str]]]
#: A site's robots.txt: its rules, None (there is none) or why it could not be read.
Robots = RobotFileParser | None | Reason


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address of ``host`` (an IP literal is its own address)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _internal(address: str, *, allow_loopback: bool = False) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_site_local:
            return True
        # An IPv4 address wrapped in IPv6 (mapped, 6to4, Teredo) is judged as IPv4.
        embedded = ip.ipv4_mapped or ip.sixtofour or (ip.teredo[1] if ip.teredo else None)
        if embedded is not None:
            return _internal(str(embedded), allow_loopback=allow_loopback)
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


def _decoder(encoding: str) -> zlib._Decompress | None:
    """A decompressor for the body's ``Content-Encoding`` (None: not compressed)."""
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip", "deflate"):
        return zlib.decompressobj(zlib.MAX_WBITS | 32)  # gzip or zlib header, detected
    raise ValueError(encoding)


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
        self.max_bytes = max_bytes
        self._max_redirects = max_redirects
        self._slots = asyncio.Semaphore(max_concurrent)
        self._allow_loopback = allow_loopback
        self._robots: OrderedDict[str, tuple[float, Robots]] = OrderedDict()
        self._robots_locks: dict[str, asyncio.Lock] = {}

    async def fetch(
        self, url: str, *, on_document: Callable[[], object] | None = None
    ) -> FetchedPage:
        """The page at ``url`` (a text page or a PDF); :class:`PageSkipped` saying why not.
        ``on_document`` is called when the answer's headers say it is a PDF, before its body
        is read (so that what will read it can get ready meanwhile)."""
        async with self._slots:
            try:
                return await asyncio.wait_for(self._fetch(url, on_document), self._timeout)
            except TimeoutError:
                raise PageSkipped(
                    url,
                    Reason(
                        f"no answer within {self._timeout:g} s", f"{self._timeout:g} 秒内没有响应"
                    ),
                ) from None
            except httpx.HTTPError as exc:
                raise PageSkipped(
                    url, _in_both("unreachable", "无法访问", type(exc).__name__)
                ) from None
            except (httpx.InvalidURL, ValueError) as exc:  # also UnicodeError
                raise PageSkipped(
                    url, _in_both("its address is not valid", "地址无效", type(exc).__name__)
                ) from None

    async def _fetch(self, url: str, on_document: Callable[[], object] | None) -> FetchedPage:
        current = url
        for _ in range(self._max_redirects + 1):
            target, address = await self._check_address(url, current)
            await self._check_robots(url, target)
            response = await self._send(target, address, ACCEPT)
            try:
                if response.is_redirect and "location" in response.headers:
                    current = urljoin(current, response.headers["location"])
                    continue
                if response.status_code >= 400:
                    raise PageSkipped(url, Reason.verbatim(f"HTTP {response.status_code}"))
                kind = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
                pdf = kind in PDF_TYPES or (kind in BINARY_TYPES and _pdf_path(target))
                if kind not in TEXT_TYPES and not pdf:
                    # The type is the server's text: shown only when it looks like a type.
                    shown = kind if _MEDIA_TYPE.fullmatch(kind) else "an unknown content type"
                    raise PageSkipped(url, _in_both("not a text page", "不是文本网页", shown))
                if pdf and on_document is not None:
                    on_document()
                body, truncated = await self._read(url, response, self.max_bytes)
            finally:
                await response.aclose()
            if pdf:
                return FetchedPage(url, current, "application/pdf", "", truncated, body)
            text = body.decode(_charset(response.charset_encoding), errors="replace")
            return FetchedPage(url, current, kind, text, truncated)
        raise PageSkipped(
            url,
            Reason(
                f"more than {self._max_redirects} redirects",
                f"重定向超过 {self._max_redirects} 次",
            ),
        )

    async def _read(self, asked: str, response: httpx.Response, limit: int) -> tuple[bytes, bool]:
        """The body, decompressed, at most ``limit`` bytes (and whether it was cut)."""
        encoding = response.headers.get("content-encoding", "").strip().lower()
        try:
            decoder = _decoder(encoding)
        except ValueError:
            raise PageSkipped(asked, NOT_DECOMPRESSED) from None
        chunks: list[bytes] = []
        size = 0
        try:
            async for raw in response.aiter_raw():
                chunk = raw if decoder is None else decoder.decompress(raw, limit - size)
                chunks.append(chunk)
                size += len(chunk)
                if size >= limit:
                    return b"".join(chunks)[:limit], True
        except zlib.error:
            raise PageSkipped(
                asked, Reason("its compressed body is damaged", "压缩内容已损坏")
            ) from None
        return b"".join(chunks), False

    async def _send(self, target: httpx.URL, address: str, accept: str) -> httpx.Response:
        """GET ``target`` at the checked ``address`` (streamed, no redirects followed)."""
        name = target.raw_host.decode("ascii")
        headers = {
            "User-Agent": USER_AGENT,
            "Accept": accept,
            "Accept-Encoding": "gzip, deflate",
            "Host": target.netloc.decode("ascii"),
        }
        extensions = {"sni_hostname": name} if target.scheme == "https" else {}
        request = self._http.build_request(
            "GET", target.copy_with(host=address), headers=headers, extensions=extensions
        )
        return await self._http.send(request, stream=True, follow_redirects=False)

    async def _check_address(self, asked: str, url: str) -> tuple[httpx.URL, str]:
        """``url`` parsed, and the address to connect to for it; :class:`PageSkipped` when it
        is not a public http(s) address (any address of its host internal)."""
        target = httpx.URL(url)
        if target.scheme not in ("http", "https") or not target.raw_host:
            raise PageSkipped(
                asked,
                Reason(
                    "only public http and https addresses are read",
                    "只读取公开的 http 和 https 地址",
                ),
            )
        if target.userinfo:
            raise PageSkipped(
                asked, Reason("addresses with credentials are not read", "不读取带凭据的地址")
            )
        host = target.raw_host.decode("ascii").lower()
        port = target.port or (443 if target.scheme == "https" else 80)
        if not (_HOSTNAME.fullmatch(host) or _is_ip(host)) or not 0 < port < 65536:
            raise PageSkipped(asked, Reason("its address is not valid", "地址无效"))
        try:
            addresses = await self._resolve(host, port)
        except (OSError, UnicodeError):
            raise PageSkipped(
                asked, Reason("its address does not resolve", "地址无法解析")
            ) from None
        loopback = self._allow_loopback
        if not addresses or any(_internal(a, allow_loopback=loopback) for a in addresses):
            raise PageSkipped(asked, PRIVATE_ADDRESS)
        return target, addresses[0].split("%", 1)[0]

    async def _check_robots(self, asked: str, target: httpx.URL) -> None:
        """:class:`PageSkipped` unless the site's robots.txt lets ``FathomBot`` read it."""
        origin = f"{target.scheme}://{target.netloc.decode('ascii')}"
        lock = self._robots_locks.setdefault(origin, asyncio.Lock())
        async with lock:
            cached = self._robots.get(origin)
            if cached is None or time.monotonic() - cached[0] > ROBOTS_TTL:
                cached = (time.monotonic(), await self._load_robots(asked, origin))
                self._robots[origin] = cached
            self._robots.move_to_end(origin)
            self._forget_robots()
        rules = cached[1]
        if isinstance(rules, Reason):
            raise PageSkipped(
                asked,
                Reason(
                    f"its robots.txt could not be read ({rules.en})",
                    f"无法读取网站的 robots.txt（{rules.zh}）",
                ),
            )
        if rules is not None and not rules.can_fetch(ROBOTS_AGENT, str(target)):
            raise PageSkipped(
                asked, Reason("disallowed by the site's robots.txt", "网站的 robots.txt 不允许读取")
            )

    def _forget_robots(self) -> None:
        """Keep at most ``ROBOTS_KEPT`` hosts in memory (and no lock of a forgotten one)."""
        while len(self._robots) > ROBOTS_KEPT:
            origin, _ = self._robots.popitem(last=False)
            lock = self._robots_locks.get(origin)
            if lock is not None and not lock.locked():
                del self._robots_locks[origin]
        if len(self._robots_locks) > 2 * ROBOTS_KEPT:  # hosts whose robots.txt never loaded
            for origin, lock in list(self._robots_locks.items()):
                if origin not in self._robots and not lock.locked():
                    del self._robots_locks[origin]

    async def _load_robots(self, asked: str, origin: str) -> Robots:
        """The site's rules (None: no robots.txt, everything allowed). A server error or an
        unreachable robots.txt disallows the whole site for now (RFC 9309): the reason why."""
        robots_url = f"{origin}/robots.txt"
        target, address = await self._check_address(asked, robots_url)
        try:
            response = await self._send(target, address, "text/plain")
            try:
                if response.status_code >= 500:
                    return Reason.verbatim(f"HTTP {response.status_code}")
                if response.status_code >= 400 or response.is_redirect:
                    return None
                body, _ = await self._read(asked, response, ROBOTS_MAX_BYTES)
            finally:
                await response.aclose()
        except httpx.HTTPError as exc:
            return Reason.verbatim(type(exc).__name__)
        except PageSkipped as skipped:
            return skipped.reason
        parser = RobotFileParser(robots_url)
        parser.parse(body.decode("utf-8", "replace").splitlines())
        return parser


def _pdf_path(target: httpx.URL) -> bool:
    """Whether the address's path names a PDF (``/report.pdf``)."""
    return target.path.lower().endswith(".pdf")


def names_document(url: str) -> bool:
    """Whether ``url``'s path names a PDF (``https://example.org/report.pdf?v=2``), as most
    addresses of PDFs a search finds do."""
    try:
        return _pdf_path(httpx.URL(url))
    except (httpx.InvalidURL, ValueError):
        return False


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _charset(declared: str | None) -> str:
    """The page's declared charset when Python knows it, else UTF-8."""
    if declared:
        try:
            codec = codecs.lookup(declared)
        except LookupError:
            return "utf-8"
        if getattr(codec, "_is_text_encoding", True):  # not "hex", "zlib" and their kind
            return codec.name
    return "utf-8"
