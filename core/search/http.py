"""A retrying JSON request shared by the HTTP search providers.

Search APIs fail transiently (rate limits, overloaded instances, flaky networks);
a couple of quick retries turn most of those into answers, while errors that
will not go away (bad key, bad request) fail at once so the run can move on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx

from core.models import SearchResult
from core.reasons import Reason
from core.search.base import SearchError
from core.timer import MONOTONIC, Timer

logger = logging.getLogger(__name__)

DEFAULT_ATTEMPTS = 3
MAX_RETRY_AFTER = 10.0
TIMED_OUT = Reason("timed out", "超时")
#: What a 401 or 403 answer means unless the provider says otherwise.
CHECK_KEY = Reason("check the API key", "请检查 API 密钥")


def _retry_after(response: httpx.Response, default: float, cap: float) -> float:
    """Seconds from a numeric ``Retry-After`` header, capped; else the backoff delay."""
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:
        return default
    return min(max(seconds, 0.0), cap)


async def request_json(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    provider: str,
    request_timeout: float,
    params: dict[str, str | int] | None = None,
    json_body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
    attempts: int = DEFAULT_ATTEMPTS,
    base_delay: float = 0.5,
    max_retry_after: float = MAX_RETRY_AFTER,
    timer: Timer = MONOTONIC,
    hints: Mapping[int, Reason] | None = None,
) -> Any:
    """Send the request and return its decoded JSON body, or raise SearchError.

    Retries connect errors, timeouts, 429 and 5xx with exponential backoff
    (``base_delay``, then double, slept on ``timer``); any other 4xx or undecodable JSON
    fails at once, with the provider's ``hints`` for that status (what to check) if any.
    """
    problem = Reason("no attempt made", "未尝试")
    for attempt in range(1, attempts + 1):
        delay = base_delay * 2 ** (attempt - 1)
        try:
            response = await client.request(
                method, url, params=params, json=json_body, headers=headers, timeout=request_timeout
            )
        except httpx.TimeoutException:
            problem = TIMED_OUT
        except httpx.TransportError as exc:
            name = type(exc).__name__
            problem = Reason(f"connection failed ({name})", f"连接失败（{name}）")
        else:
            status = response.status_code
            if status == 429 or status >= 500:
                problem = Reason.verbatim(f"HTTP {status}")
                if status == 429:
                    delay = _retry_after(response, delay, max_retry_after)
            elif status >= 400:
                hint = (hints or {}).get(status)
                if hint is None:
                    hint = CHECK_KEY if status in (401, 403) else None
                shown = Reason.verbatim(f"HTTP {status}")
                if hint is not None:
                    shown = Reason(f"{shown.en} ({hint.en})", f"{shown.zh}（{hint.zh}）")
                raise SearchError(shown.prefixed(provider))
            else:
                try:
                    return response.json()
                except ValueError:
                    raise SearchError(
                        Reason("malformed JSON in response", "响应中的 JSON 格式错误").prefixed(
                            provider
                        )
                    ) from None
        if attempt < attempts:
            logger.warning(
                "%s: %s (attempt %d/%d), retrying in %.2fs",
                provider,
                problem,
                attempt,
                attempts,
                delay,
            )
            await timer.sleep(delay)
    raise SearchError(
        Reason(
            f"{problem.en} after {attempts} attempts", f"{problem.zh}（尝试 {attempts} 次）"
        ).prefixed(provider)
    )


def expect_dict(data: Any, provider: str) -> dict[str, Any]:
    """The decoded body as an object, or SearchError when it has another shape."""
    if not isinstance(data, dict):
        raise SearchError(
            Reason(
                "unexpected response (not a JSON object)", "意外的响应（不是 JSON 对象）"
            ).prefixed(provider)
        )
    return data


def expect_items(value: Any, provider: str) -> list[dict[str, Any]]:
    """A list of result objects (missing means none); non-objects are skipped."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise SearchError(
            Reason(
                "unexpected response (results is not a list)", "意外的响应（results 不是列表）"
            ).prefixed(provider)
        )
    return [item for item in value if isinstance(item, dict)]


class HttpSearchProvider:
    """Holds what every HTTP provider needs; subclasses build the request and map fields."""

    name = "http"
    #: Used when no ``base_url`` is given (hosted APIs); None means one is required.
    default_base_url: str | None = None
    #: What to check when the provider answers a status that will not go away.
    status_hints: ClassVar[Mapping[int, Reason]] = {}

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_results: int = 8,
        timeout: float = 20.0,
        base_delay: float = 0.5,
        timer: Timer = MONOTONIC,
    ) -> None:
        url = base_url or self.default_base_url
        if not url:
            raise ValueError(f"{self.name}: a base URL is required")
        self._client = client
        self._base_url = url.rstrip("/")
        self._api_key = api_key or ""
        self.max_results = max_results
        self._timeout = timeout
        self._base_delay = base_delay
        self._timer = timer

    async def search(self, query: str) -> list[SearchResult]:
        raise NotImplementedError

    async def _get_json(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str | int] | None = None,
        json_body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        data = await request_json(
            self._client,
            method,
            f"{self._base_url}{path}",
            provider=self.name,
            request_timeout=self._timeout,
            params=params,
            json_body=json_body,
            headers=headers,
            base_delay=self._base_delay,
            timer=self._timer,
            hints=self.status_hints,
        )
        return expect_dict(data, self.name)
