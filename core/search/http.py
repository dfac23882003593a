"""A retrying JSON request shared by the HTTP search providers.

Search APIs fail transiently (rate limits, overloaded instances, flaky networks);
a couple of quick retries turn most of those into answers, while errors that
will not go away (bad key, bad request, a login or a bot challenge in front of the
service) fail at once so the run can move on. What a failure says is judged in
:mod:`core.search.failure`, the same for every provider.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, ClassVar

import httpx

from core.models import SearchResult
from core.search.base import SearchError
from core.search.failure import (
    CHECK_KEY,
    TIMED_OUT,
    Failure,
    response_failure,
    transport_failure,
    unreadable_answer,
)
from core.search.query import QueryLimit
from core.timer import MONOTONIC, Timer
from core.words.reasons import Reason

__all__ = ["CHECK_KEY", "TIMED_OUT", "HttpSearchProvider", "request_json"]

logger = logging.getLogger(__name__)

DEFAULT_ATTEMPTS = 3
MAX_RETRY_AFTER = 10.0


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
    url_setting: str = "the provider's URL",
) -> Any:
    """Send the request and return its decoded JSON body, or raise SearchError.

    Retries what may pass (connection failures, timeouts, answers cut off, 429 and 5xx) with
    exponential backoff (``base_delay``, then double, slept on ``timer``; a 429's
    ``Retry-After`` instead); anything else fails at once, with what to check (the provider's
    ``hints`` for a status; ``url_setting`` names the setting that holds its URL).
    """
    failure = Failure(Reason("no attempt made", "未尝试"))
    for attempt in range(1, attempts + 1):
        delay = base_delay * 2 ** (attempt - 1)
        try:
            response = await client.request(
                method, url, params=params, json=json_body, headers=headers, timeout=request_timeout
            )
        except httpx.RequestError as exc:  # (no answer, a redirect loop, a body not decoded)
            failure = transport_failure(exc)
        else:
            judged = response_failure(
                response, hints=hints or {}, url_setting=url_setting, max_wait=max_retry_after
            )
            if judged is None:
                try:
                    return response.json()
                except ValueError:
                    judged = unreadable_answer(response, url_setting)
            failure = judged
        if not failure.retry:
            raise SearchError(failure.reason.prefixed(provider))
        if attempt < attempts:
            wait = failure.wait if failure.wait is not None else delay
            logger.warning(
                "%s: %s (attempt %d/%d), retrying in %.2fs",
                provider,
                failure.reason,
                attempt,
                attempts,
                wait,
            )
            await timer.sleep(wait)
    problem = failure.reason
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
    #: The setting that holds the provider's URL (named in what to check).
    url_setting: ClassVar[str] = "the provider's URL"
    #: The longest query the provider accepts; a longer one is shortened before it is sent.
    query_limit: ClassVar[QueryLimit] = QueryLimit(400)

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
        """Results for ``query``, shortened first to what the provider accepts."""
        return await self._search(self.query_limit.fit(query, self.name))

    async def _search(self, query: str) -> list[SearchResult]:
        """Results for a query within the provider's limit (each provider's request)."""
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
            url_setting=self.url_setting,
        )
        return expect_dict(data, self.name)
