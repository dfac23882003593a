"""Why a search request gave no results: one line, from what the server really sent.

Every HTTP search provider is judged here, so a failure reads the same whichever provider met
it: the API's own message (Tavily's ``{"detail": {"error": ...}}``, Brave's ``ErrorResponse``),
an error page's title (nginx's ``502 Bad Gateway``, never its HTML), an answer cut off mid-way,
a login in front of the service (HTTP basic auth, a redirect to a login page, a login page
itself), a bot challenge (Cloudflare's, SearXNG's limiter). Where the operator can act, the
line says what to check. A server's words are untrusted: they enter as inert text, one short
line (:func:`core.search.base.result_text`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from core.search.base import result_text
from core.words.reasons import Reason

#: How much of an error body is read for its words, and how many of them a line keeps.
BODY_CHARS = 65536
WORDS_CHARS = 160

TIMED_OUT = Reason("timed out", "超时")
#: What a 401 or 403 answer means unless the provider or the answer says otherwise.
CHECK_KEY = Reason("check the API key", "请检查 API 密钥")
MALFORMED = Reason("malformed JSON in response", "响应中的 JSON 格式错误")

_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_H1 = re.compile(r"<h1\b[^>]*>(.*?)</h1\s*>", re.IGNORECASE | re.DOTALL)
_TAG = re.compile(r"<[^>]*>")
_PASSWORD_FIELD = re.compile(r"<input\b[^>]*\btype\s*=\s*[\"']?password\b", re.IGNORECASE)
_LOGIN_WORDS = re.compile(
    r"\b(?:log[ -]?in|sign[ -]?in|sign[ -]?on|authenticat\w*|authelia|authentik|keycloak)\b",
    re.IGNORECASE,
)
#: Where a login lives: its path (``/oauth2/sign_in``, ``/login``, Cloudflare Access's
#: ``/cdn-cgi/access/login/...``) or its host (``auth.example.com``, ``*.cloudflareaccess.com``).
_LOGIN_PATH = re.compile(
    r"log[_-]?in|sign[_-]?in|/sso\b|oauth|openid|authorize|/auth\b|/cdn-cgi/access",
    re.IGNORECASE,
)
_LOGIN_HOST = re.compile(r"^(?:auth|login|sso|id|idp|accounts?)\.|cloudflareaccess\.com$")
_CHALLENGE_TITLE = re.compile(r"^just a moment\b", re.IGNORECASE)
_HOST = re.compile(r"[a-z0-9.-]{1,100}")
_PATH = re.compile(r"/[\w./-]{0,60}")
#: The keys APIs put their message under, in the order they are read.
_MESSAGE_KEYS = ("detail", "error", "errors", "message", "msg", "error_description", "title")


@dataclass(frozen=True)
class Failure:
    """A failed search request: ``reason`` says why; ``retry`` whether another attempt may
    help; ``wait`` the seconds the server asked to wait first (``Retry-After``), if any."""

    reason: Reason
    retry: bool = False
    wait: float | None = None


def transport_failure(exc: httpx.RequestError) -> Failure:
    """A request that got no complete answer (worth another attempt, unless it went round in
    redirects)."""
    name = type(exc).__name__
    message = str(exc).lower()
    if isinstance(exc, httpx.TimeoutException):
        return Failure(TIMED_OUT, retry=True)
    if isinstance(exc, httpx.TooManyRedirects):
        return Failure(
            Reason(
                "redirected again and again (a loop, as a login that sends back to itself)",
                "被反复重定向（形成循环，例如登录页面不断跳回自身）",
            )
        )
    if isinstance(exc, httpx.RemoteProtocolError) and "without sending complete" in message:
        # h11: "peer closed connection without sending complete message body (incomplete
        # chunked read)" or "(received 12 bytes, expected 800)": the answer began, then stopped.
        return Failure(
            Reason(
                "the answer was cut off mid-way (the server closed the connection before its end)",
                "响应中途被截断（服务器在响应结束前关闭了连接）",
            ),
            retry=True,
        )
    if isinstance(exc, httpx.RemoteProtocolError) and "without sending a response" in message:
        return Failure(
            Reason(
                "the server closed the connection without answering", "服务器未作答就关闭了连接"
            ),
            retry=True,
        )
    if isinstance(exc, httpx.ReadError):
        return Failure(
            Reason(
                f"the connection broke while the answer was read ({name})",
                f"读取响应时连接中断（{name}）",
            ),
            retry=True,
        )
    return Failure(Reason(f"connection failed ({name})", f"连接失败（{name}）"), retry=True)


def response_failure(
    response: httpx.Response,
    *,
    hints: Mapping[int, Reason],
    url_setting: str,
    max_wait: float,
) -> Failure | None:
    """Why ``response`` is no answer, or None for a 2xx (whose body the caller reads).

    Retried: 429 (after its ``Retry-After``, capped at ``max_wait``) and 5xx; not retried: a
    bot challenge, a redirect, a login and any other 4xx (``hints`` says what to check for a
    status, else a 401 or 403 means the key)."""
    status = response.status_code
    if status < 300 and not _challenge_header(response):
        return None  # (its body is read once, by the caller)
    body = _Body.of(response)
    if _challenged(response, body):
        return Failure(_challenge(status))
    if 300 <= status < 400:
        return Failure(_redirected(response, url_setting))
    if status < 300:
        return None
    if status == 401 and (basic := _basic_realm(response)) is not None:
        return Failure(_needs_basic_login(basic, url_setting))
    if body.login:
        return Failure(_login_page(status, body, response, url_setting))
    shown = _status_line(status, body.words)
    hint = hints.get(status)
    if hint is None and status in (401, 403):
        hint = CHECK_KEY
    if hint is not None:
        shown = Reason(f"{shown.en} ({hint.en})", f"{shown.zh}（{hint.zh}）")
    if status == 429:
        return Failure(shown, retry=True, wait=_retry_after(response, max_wait))
    return Failure(shown, retry=status >= 500)


def unreadable_answer(response: httpx.Response, url_setting: str) -> Failure:
    """Why a 2xx whose body is not JSON is no answer: a login page it was sent to, a bot
    challenge, a web page where the API should be, or JSON cut or mangled."""
    body = _Body.of(response)
    if _challenged(response, body):
        return Failure(_challenge(response.status_code))
    if body.login:
        return Failure(_login_page(response.status_code, body, response, url_setting))
    if body.html:
        place = _place(str(response.url)) if response.history else ""
        where = f" at {place}" if place else ""
        where_zh = f"（{place}）" if place else ""
        title = f' ("{body.words}")' if body.words else ""
        return Failure(
            Reason(
                f"a web page{where}{title} answered instead of the API's JSON; check {url_setting}",
                f"返回的是网页{where_zh}{title}而不是接口的 JSON；请检查 {url_setting}",
            )
        )
    return Failure(MALFORMED)


# --- what the body says ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Body:
    """What an answer's body says, as inert one-line text: ``words`` is the API's message,
    the page's title (or first heading) or a short plain-text answer."""

    words: str
    html: bool
    login: bool

    @classmethod
    def of(cls, response: httpx.Response) -> _Body:
        try:
            text = response.text[:BODY_CHARS]
        except Exception:  # an undecodable body says nothing
            return cls("", False, False)
        kind = response.headers.get("content-type", "").lower()
        start = text.lstrip()[:64].lower()
        if "json" in kind or start.startswith(("{", "[")):
            try:
                return cls(_inert(_json_words(json.loads(text))), False, False)
            except ValueError:
                pass
        looks_html = start.startswith(("<!doctype html", "<html", "<head", "<title"))
        if ("html" in kind and "<" in text) or looks_html:
            heading = _TITLE.search(text) or _H1.search(text)
            title = _inert(_TAG.sub(" ", heading.group(1))) if heading else ""
            login = bool(_PASSWORD_FIELD.search(text) or _LOGIN_WORDS.search(title))
            return cls(title, True, login)
        # A short plain answer (SearXNG's limiter: "Too Many Requests", sent as text/html).
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        first = lines[0] if lines else ""
        short = len(first) <= WORDS_CHARS and "<" not in first
        return cls(_inert(first) if short else "", False, False)


def _json_words(data: Any, depth: int = 0) -> str:
    """The message of a JSON error body: Tavily's ``{"detail": {"error": ...}}``, FastAPI's
    ``{"detail": ...}``, Brave's ``{"error": {"code", "detail"}}`` (or ``errors: [...]``),
    ``{"error": "..."}``, ``{"message": ...}``; a bare code when that is all there is."""
    if depth > 3:
        return ""
    if isinstance(data, str):
        return data
    if isinstance(data, list):
        return next((w for item in data[:3] if (w := _json_words(item, depth + 1))), "")
    if not isinstance(data, dict):
        return ""
    for key in _MESSAGE_KEYS:
        if key in data and (words := _json_words(data[key], depth + 1)):
            return words + _invalid_field(data)
    code = data.get("code")
    return code if isinstance(code, str) else ""


def _invalid_field(error: dict[str, Any]) -> str:
    """`` (query.q: String should have at most 400 characters)``: the field a validation
    error names in pydantic's ``meta.errors`` (Brave's 422 ``VALIDATION``), else ''."""
    meta = error.get("meta")
    found = meta.get("errors") if isinstance(meta, dict) else None
    first = found[0] if isinstance(found, list) and found else None
    if not isinstance(first, dict) or not isinstance(first.get("msg"), str):
        return ""
    place = first.get("loc")
    where = ".".join(str(p) for p in place) if isinstance(place, list) else ""
    return f" ({where}: {first['msg']})" if where else f" ({first['msg']})"


def _inert(text: str) -> str:
    """Outside words as one short line of inert text."""
    words = result_text(text)
    return words if len(words) <= WORDS_CHARS else words[: WORDS_CHARS - 1].rstrip() + "…"


def _status_line(status: int, words: str) -> Reason:
    """``HTTP 502 Bad Gateway`` (a title that starts with the status, or the standard phrase),
    else ``HTTP 400 "the server's words"``, else ``HTTP 500``."""
    phrase = httpx.codes.get_reason_phrase(status)
    if not words:
        return Reason.verbatim(f"HTTP {status}")
    if words.startswith(f"{status} ") or words == phrase:
        shown = words if words.startswith(f"{status} ") else f"{status} {words}"
        return Reason.verbatim(f"HTTP {shown}")
    return Reason(f'HTTP {status} "{words}"', f"HTTP {status}“{words}”")


# --- logins, redirects and challenges ----------------------------------------------------------


def _basic_realm(response: httpx.Response) -> str | None:
    """The realm of a ``WWW-Authenticate: Basic realm="..."`` challenge ('' without one), or
    None when the server asks for no basic login."""
    challenge = response.headers.get("www-authenticate", "")
    if not challenge.lower().startswith("basic"):
        return None
    found = re.search(r'realm\s*=\s*"([^"]*)"', challenge, re.IGNORECASE)
    return _inert(found.group(1))[:60] if found else ""


def _needs_basic_login(realm: str, url_setting: str) -> Reason:
    named = f', realm "{realm}"' if realm else ""
    named_zh = f"，realm “{realm}”" if realm else ""
    return Reason(
        f"HTTP 401: needs a login (HTTP basic auth{named}); put the user and password in "
        f"{url_setting}: https://user:password@host/",
        f"HTTP 401：需要登录（HTTP 基本认证{named_zh}）；请把用户名和密码写进 {url_setting}："
        "https://user:password@host/",
    )


def _login_hint(url_setting: str) -> Reason:
    return Reason(
        f"let the bot's requests through the login (a rule for its address or the search path) "
        f"or point {url_setting} past it",
        "请让机器人的请求绕过登录（为其地址或搜索路径设规则），"
        f"或让 {url_setting} 指向登录之后的地址",
    )


def _login_page(status: int, body: _Body, response: httpx.Response, url_setting: str) -> Reason:
    """A login page answered: the final one of redirects, or the first answer itself."""
    place = _place(str(response.url)) if response.history else ""
    where = f" at {place}" if place else ""
    where_zh = f"（{place}）" if place else ""
    title = f' ("{body.words}")' if body.words else ""
    hint = _login_hint(url_setting)
    # (a 200 at the end of redirects says nothing a person could act on: no status then)
    said, said_zh = (f"HTTP {status}: ", f"HTTP {status}：") if status != 200 else ("", "")
    return Reason(
        f"{said}a login page{where}{title} answered instead of the search; {hint.en}",
        f"{said_zh}返回的是登录页面{where_zh}{title}，而不是搜索结果；{hint.zh}",
    )


def _redirected(response: httpx.Response, url_setting: str) -> Reason:
    """A redirect the client did not follow: to a login page, or elsewhere."""
    status = response.status_code
    location = response.headers.get("location", "")
    target = urljoin(str(response.url), location) if location else ""
    place = _place(target) or "another address"
    if _is_login_place(target):
        hint = _login_hint(url_setting)
        return Reason(
            f"HTTP {status}: redirected to a login page at {place}; {hint.en}",
            f"HTTP {status}：被重定向到登录页面（{place}）；{hint.zh}",
        )
    return Reason(
        f"HTTP {status}: redirected to {place}; check {url_setting}",
        f"HTTP {status}：被重定向到 {place}；请检查 {url_setting}",
    )


def _is_login_place(url: str) -> bool:
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        return False
    return bool(_LOGIN_PATH.search(parts.path) or _LOGIN_HOST.search(host))


def _place(url: str) -> str:
    """``auth.example.com /oauth2/sign_in`` for a note: the host and path when they look like
    one (no query, which may repeat the search), else ''."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
    except ValueError:
        return ""
    if not _HOST.fullmatch(host):
        return ""
    path = parts.path if _PATH.fullmatch(parts.path) and parts.path != "/" else ""
    return f"{host} {path}" if path else host


def _challenged(response: httpx.Response, body: _Body) -> bool:
    """Cloudflare's challenge page: ``cf-mitigated: challenge`` on any challenge (Cloudflare's
    "Detect a Challenge Page response"), or its "Just a moment..." page without it."""
    return _challenge_header(response) or (body.html and bool(_CHALLENGE_TITLE.search(body.words)))


def _challenge_header(response: httpx.Response) -> bool:
    mitigated: str = response.headers.get("cf-mitigated", "")
    return mitigated.strip().lower() == "challenge"


def _challenge(status: int) -> Reason:
    return Reason(
        f'HTTP {status}: stopped by a bot challenge (Cloudflare\'s "Just a moment...", which '
        "only a browser passes); let the bot's address through (a WAF skip rule) or use an "
        "address without the challenge",
        f"HTTP {status}：被机器人验证拦截（Cloudflare 的验证页面，只有浏览器能通过）；"
        "请放行机器人的地址（WAF 跳过规则），或改用没有验证的地址",
    )


def _retry_after(response: httpx.Response, cap: float) -> float | None:
    """Seconds from a numeric ``Retry-After`` header, capped; None without one."""
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return min(max(seconds, 0.0), cap)
