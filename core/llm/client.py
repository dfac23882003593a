"""The chat-completion client for any OpenAI-compatible endpoint.

The engine needs two things from a model: free text (the report) and small JSON decisions
(the planner). Endpoints differ in what they support (``response_format`` flavours, usage
reporting, reasoning preambles, finish reasons, error bodies), so this module hides those
differences and turns every failure into :class:`LLMError`, which the engine can degrade on
instead of crashing.

Each attempt of a call is bounded by ``timeout`` as a whole, measured on an injected
:class:`~core.timer.Timer` (a server that sends a blank line now and then, or nothing after its
headers, never resets it); an attempt that timed out is not repeated. What is worth another
try (a 429, a 5xx, a broken connection, an answer that failed on the provider's side) is
retried here, after the wait the server asked for (``Retry-After``, Gemini's
``RetryInfo.retryDelay``) or a short back-off, also on the timer.

``openai`` is imported lazily: importing it costs most of a second, and CLI commands that never
talk to a model (``fathom thread list``, ``--help``) should not pay for it.
"""

from __future__ import annotations

import email.utils
import html
import json
import logging
import math
import random
import re
import sys
import time
import types
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel

from core.llm.answers import (
    Answer,
    BadJSON,
    Reasoned,
    message_text,
    parse_answer,
    split_reasoning,
    strip_harmony,
)
from core.llm.errors import FailureKind, LLMError, LLMInvalidJSON, public_endpoint
from core.models import Usage
from core.timer import MONOTONIC, Timer, within

if TYPE_CHECKING:
    import ssl

    import httpx
    from openai import AsyncOpenAI

    from core.metrics import Metrics
    from core.settings import Settings

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)
R = TypeVar("R")
JsonMode = Literal["auto", "json_schema", "json_object", "prompt"]
_OPENAI_AIOHTTP = "openai._vendor.httpx_aiohttp"
# What a server sends to name a response_format it does not take (only such a 400 turns the
# JSON mode off; a context-length or content-filter 400 is not about it).
_JSON_MODE_REFUSED = re.compile(r"response_format|json_schema|json_object|json mode", re.I)
_STATUS_REASONS = {
    400: "bad request",
    401: "authentication failed (check the API key)",
    403: "permission denied (check the API key and model access)",
    404: "not found (check the model name and base URL)",
    408: "request timed out",
    409: "conflict",
    422: "unprocessable request",
    429: "rate limited or out of quota",
}
#: The first back-off before a retry the server set no wait for, and the longest (doubling
#: in between, less up to a quarter at random: the openai SDK's own schedule).
FIRST_BACKOFF, MAX_BACKOFF = 0.5, 8.0
#: The longest wait a server may ask for before a retry; asked for more, the call fails now
#: and says how long it was asked to wait.
MAX_RETRY_WAIT = 60.0
#: Statuses worth another try (the openai SDK's list): timeout, conflict, rate limit, 5xx.
_RETRIED_STATUSES = frozenset({408, 409, 429})
_HTML_TITLE = re.compile(r"<title[^>]*>(.*?)</title>|<h1[^>]*>(.*?)</h1>", re.I | re.S)
_TAG = re.compile(r"<[^>]*>")
# A protobuf Duration as JSON: "37s", "1.5s" (Google's RetryInfo.retryDelay).
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)s\s*")
# What is kept of a finish_reason (it is shown in notes): a word, not markup.
_REASON_CHARS = re.compile(r"[^A-Za-z0-9_.:-]")


def _one_line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]


def _import_openai() -> types.ModuleType:
    """``import openai``, without the optional aiohttp transport it would load eagerly.

    ``openai._base_client`` imports its vendored aiohttp transport whenever aiohttp is
    installed (it is: the Slack SDK uses it), which costs about 0.1 s and 10 MB at start-up.
    Fathom never uses that transport, so unless aiohttp is already loaded the vendored
    module is marked absent, which the SDK handles as "aiohttp extra not installed".
    """
    if not any(name in sys.modules for name in ("openai", "aiohttp", _OPENAI_AIOHTTP)):
        # None in sys.modules makes the import raise ImportError (importlib's documented way).
        sys.modules[_OPENAI_AIOHTTP] = None  # type: ignore[assignment]
    import openai

    return openai


def _estimate_tokens(chars: int) -> int:
    return math.ceil(chars / 4)


class _Failed(Exception):
    """One attempt of a call failed with ``error``; ``retry``: another attempt is worth it,
    after ``wait`` seconds (None: the back-off)."""

    def __init__(self, error: LLMError, *, retry: bool = False, wait: float | None = None) -> None:
        super().__init__(str(error))
        self.error, self.retry, self.wait = error, retry, wait


class ChatModel:
    """One model on one endpoint; retries, JSON handling and usage accounting live here."""

    def __init__(
        self,
        *,
        model: str,
        api_key: str,
        base_url: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        json_mode: str = "auto",
        http_client: httpx.AsyncClient | None = None,
        ssl_context: ssl.SSLContext | None = None,
        metrics: Metrics | None = None,
        timer: Timer = MONOTONIC,
    ) -> None:
        """``timeout``: seconds one attempt may take as a whole, measured on ``timer`` (which
        also waits out the pause before a retry); ``max_retries``: further attempts of a call
        that failed in a way worth retrying; ``ssl_context``: share one TLS context between
        clients (see core.runtime); ``metrics``: where calls and tokens are counted (by model).

        Without ``ssl_context`` (and without ``http_client``) the SDK builds its own client and
        loads a CA bundle for it, about 30 ms even for an ``http://`` endpoint.
        """
        openai = _import_openai()

        if json_mode not in get_args(JsonMode):
            raise ValueError(f"json_mode must be one of {get_args(JsonMode)}, not {json_mode!r}")
        self.model = model
        self._metrics = metrics
        self.json_mode: JsonMode = cast(JsonMode, json_mode)
        #: The name the endpoint takes a cap on the answer by (see :meth:`complete`).
        self._cap_parameter = "max_tokens"
        self.timeout = timeout
        self.max_retries = max_retries
        self._timer = timer
        self._api_key = api_key
        client: Any = http_client
        if client is None and ssl_context is not None:
            # The SDK's own defaults (limits, redirects), with the shared TLS context.
            client = openai.DefaultAsyncHttpxClient(verify=ssl_context, timeout=timeout)
        self._client: AsyncOpenAI = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=0,  # retried by _create, where a timed-out attempt is not repeated
            http_client=client,
        )
        self.base_url = str(self._client.base_url)

    async def complete(
        self,
        messages: list[dict[str, str]],
        *,
        usage: Usage,
        temperature: float | None = None,
        max_tokens: int | None = None,
    ) -> Answer:
        """The assistant's answer to ``messages``; raises :class:`LLMError` on failure.

        ``max_tokens`` caps the answer; an endpoint that refuses the parameter by that name
        (OpenAI's reasoning models: "Unsupported parameter: 'max_tokens' ... Use
        'max_completion_tokens' instead") is asked again with ``max_completion_tokens``, and
        that name is used from then on."""
        from openai import BadRequestError

        extra: dict[str, Any] = {}
        if temperature is not None:
            extra["temperature"] = temperature
        if max_tokens is None:
            return await self._create(messages, usage, extra)
        named = self._cap_parameter
        try:
            return await self._create(messages, usage, {**extra, named: max_tokens})
        except LLMError as exc:
            cause = exc.__cause__
            refused = isinstance(cause, BadRequestError) and _names_max_tokens(cause)
            if named != "max_tokens" or not refused:
                raise
        log.warning("model %s refused max_tokens; using max_completion_tokens", self.model)
        self._cap_parameter = "max_completion_tokens"
        return await self._create(messages, usage, {**extra, "max_completion_tokens": max_tokens})

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: type[T],
        *,
        usage: Usage,
        schema_name: str = "answer",
    ) -> T:
        """Ask for one JSON object and validate it as ``schema``; re-asks once on garbage
        (an answer that may be cut off, whatever its finish reason, is garbage too)."""
        answer = await self._create_json(messages, schema, schema_name, usage)
        try:
            return parse_answer(answer, schema)
        except BadJSON as exc:
            problem = str(exc)
        log.warning("model %s answered invalid JSON (%s); asking again", self.model, problem)
        retry = [
            *messages,
            {"role": "assistant", "content": answer.text},
            {
                "role": "user",
                "content": f"Your previous answer was not usable: {problem}. Answer again with "
                "only the JSON object, no prose and no code fences. It must match this JSON "
                f"schema: {json.dumps(schema.model_json_schema(by_alias=True))}",
            },
        ]
        second = await self._create_json(retry, schema, schema_name, usage)
        try:
            return parse_answer(second, schema)
        except BadJSON as exc:
            raise LLMInvalidJSON(
                f"model {self.model} twice answered invalid JSON: {exc}",
                second.text,
                model=self.model,
                endpoint=public_endpoint(self.base_url),
                said=str(exc),
            ) from None

    async def aclose(self) -> None:
        await self._client.close()

    async def _create_json(
        self, messages: list[dict[str, str]], schema: type[BaseModel], name: str, usage: Usage
    ) -> Answer:
        """One JSON request; in auto mode, downgrades to prompt mode if the endpoint refuses
        ``response_format`` (a 400 that names it; any other 400 is the request's own)."""
        from openai import BadRequestError

        mode = self.json_mode
        extra: dict[str, Any] = {}
        if mode == "json_schema":
            schema_json = schema.model_json_schema(by_alias=True)
            extra["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema_json, "strict": False},
            }
        elif mode in ("json_object", "auto"):
            extra["response_format"] = {"type": "json_object"}
        try:
            answer = await self._create(messages, usage, extra)
        except LLMError as exc:
            cause = exc.__cause__
            refused = isinstance(cause, BadRequestError) and _names_json_mode(cause)
            if mode != "auto" or not refused:
                raise
            log.warning("model %s rejected response_format; using prompt-only JSON", self.model)
            self.json_mode = "prompt"
            return await self._create(messages, usage, {})
        return answer

    async def _create(
        self, messages: list[dict[str, str]], usage: Usage, extra: dict[str, Any]
    ) -> Answer:
        """One model call: attempts bounded by ``timeout`` each, and retried while the failure
        is worth another try and ``max_retries`` allow."""
        usage.llm_calls += 1
        retries = 0
        while True:
            try:
                return await self._attempt(messages, usage, extra)
            except _Failed as failed:
                error = failed.error
                if not failed.retry or retries >= self.max_retries:
                    raise error from error.__cause__
                wait = failed.wait if failed.wait is not None else _backoff(retries)
                if wait > MAX_RETRY_WAIT:
                    raise self._failure(
                        error.kind,
                        f"{error.detail}; the server asks to wait {wait:.0f} s before another "
                        f"try, longer than the {MAX_RETRY_WAIT:.0f} s a call waits",
                        error.said,
                    ) from error.__cause__
                log.warning(
                    "model %s: %s; trying again in %.1f s (retry %d of %d)",
                    self.model,
                    error.detail,
                    wait,
                    retries + 1,
                    self.max_retries,
                )
                await self._timer.sleep(wait)
                retries += 1

    async def _attempt(
        self, messages: list[dict[str, str]], usage: Usage, extra: dict[str, Any]
    ) -> Answer:
        """One HTTP request within the deadline, and its answer taken apart."""
        import openai

        try:
            raw, response = await self._timed(
                within(self._timer, self.timeout, self._request(messages, extra))
            )
        except TimeoutError as exc:
            self._count(False)
            reason = f"timed out after {self.timeout:g}s"
            raise self._not_retried(
                exc, FailureKind.TIMEOUT, reason, f"{self.timeout:g} s"
            ) from exc
        except openai.APIError as exc:
            self._count(False)
            kind, reason, said = self._describe(exc)
            error = self._failure(kind, reason, said)
            error.__cause__ = exc
            raise _Failed(error, retry=_worth_retrying(exc), wait=_asked_wait(exc)) from exc
        except ValueError as exc:  # declared JSON, but the body is not
            self._count(False)
            raise _Failed(
                self._bad_answer(
                    f"answered HTTP 200 with a body that is not JSON ({_one_line(str(exc), 80)});"
                    " check that OPENAI_BASE_URL is the API's base URL (usually ending in /v1)"
                )
            ) from exc
        if not hasattr(response, "choices"):  # an HTML page, an SSE stream: not a completion
            self._count(False)
            raise _Failed(self._bad_answer(_not_a_completion(raw.headers.get("content-type", ""))))
        choice = _first_choice(response)
        message = getattr(choice, "message", None)
        content = message_text(getattr(message, "content", None))
        finish = _finish_reason(choice)
        failure = _extra(choice).get("error")
        failed = choice is None or finish == "error" or bool(failure)
        self._count_usage(response, messages, content, usage, ok=not failed)
        if choice is None:
            reason, code = _no_choice(response)
            raise _Failed(self._bad_answer(reason), retry=_transient(code))
        if failed:
            raise self._provider_failed(failure)
        reasoned = split_reasoning(strip_harmony(content))
        if finish == "content_filter":
            raise _Failed(
                self._bad_answer("had its answer withheld by the provider's content filter")
            )
        if not reasoned.answer:
            raise _Failed(self._bad_answer(_why_empty(choice, finish, reasoned)))
        return Answer(reasoned.answer, finish or "stop")

    async def _timed(self, request: Awaitable[R]) -> R:
        """``request``, its seconds observed (``fathom_llm_call_seconds``), failed or not."""
        started = time.monotonic()
        try:
            return await request
        finally:
            if self._metrics is not None:
                seconds = time.monotonic() - started
                self._metrics.llm_seconds.labels(self.model).observe(seconds)

    async def _request(
        self, messages: list[dict[str, str]], extra: dict[str, Any]
    ) -> tuple[Any, Any]:
        """The raw response to one request and what it parses to (the body is read whole)."""
        raw = await self._client.chat.completions.with_raw_response.create(
            model=self.model, messages=cast(Any, messages), **extra
        )
        return raw, raw.parse()

    def _not_retried(self, exc: Exception, kind: FailureKind, reason: str, said: str) -> _Failed:
        """An attempt that failed in a way not worth repeating, caused by ``exc``."""
        error = self._failure(kind, reason, said)
        error.__cause__ = exc
        return _Failed(error)

    def _provider_failed(self, failure: object) -> _Failed:
        """An answer the provider ended with ``finish_reason: "error"`` (OpenRouter puts the
        error in the choice: ``{"code", "message", "metadata"}``); retried when its code is a
        transient one."""
        code = failure.get("code") if isinstance(failure, dict) else None
        said = failure.get("message") if isinstance(failure, dict) else failure
        message = _one_line(str(said or "no message"))
        where = f" (code {code})" if code is not None else ""
        kind = _status_kind(code) if isinstance(code, int) else FailureKind.SERVER
        reason = f"failed while answering (finish_reason error){where}: {message}"
        return _Failed(self._failure(kind, reason, f"{message}{where}"), retry=_transient(code))

    def _count(self, ok: bool, prompt: int = 0, completion: int = 0) -> None:
        if self._metrics is not None:
            self._metrics.llm_call(self.model, ok, prompt, completion)

    def _count_usage(
        self,
        response: Any,
        messages: list[dict[str, str]],
        content: str,
        usage: Usage,
        *,
        ok: bool,
    ) -> None:
        """Count the tokens of an answer (estimated when the endpoint reports none; an
        answer without choices may still have been billed)."""
        reported = getattr(response, "usage", None)
        if reported is not None:
            prompt = getattr(reported, "prompt_tokens", 0) or 0
            completion = getattr(reported, "completion_tokens", 0) or 0
        else:
            prompt = _estimate_tokens(sum(len(m.get("content", "")) for m in messages))
            completion = _estimate_tokens(len(content))
        usage.count_tokens(self.model, prompt, completion)
        self._count(ok, prompt, completion)

    def _bad_answer(self, reason: str) -> LLMError:
        """The failure of a call that was answered, but not usably (``reason``: a predicate,
        e.g. "returned an empty answer"; an error it quotes may echo the key)."""
        if self._api_key:
            reason = reason.replace(self._api_key, "***")
        return LLMError(
            f"model {self.model} {reason}",
            kind=FailureKind.BAD_ANSWER,
            model=self.model,
            endpoint=public_endpoint(self.base_url),
            detail=f"it {reason}",
        )

    def _failure(self, kind: FailureKind, reason: str, said: str) -> LLMError:
        """The :class:`LLMError` of a failed call: short, one line and key-free."""
        if self._api_key:
            reason = reason.replace(self._api_key, "***")
            said = said.replace(self._api_key, "***")
        return LLMError(
            f"LLM {self.model} failed: {reason}",
            kind=kind,
            model=self.model,
            endpoint=public_endpoint(self.base_url),
            detail=reason,
            said=said,
        )

    def _describe(self, exc: Exception) -> tuple[FailureKind, str, str]:
        """What kind of failure ``exc`` is, a short description of it, and the outside words
        in that description (``LLMError.said``)."""
        import openai

        if isinstance(exc, openai.APITimeoutError):
            return FailureKind.TIMEOUT, f"timed out after {self.timeout:g}s", f"{self.timeout:g} s"
        if isinstance(exc, openai.APIConnectionError):
            broken = _broken_connection(exc.__cause__)
            if broken is not None:
                return FailureKind.DISCONNECTED, broken, broken
            host = urlsplit(public_endpoint(self.base_url)).netloc  # (no user or password)
            return FailureKind.UNREACHABLE, f"could not connect to {host}", host
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            reason = _STATUS_REASONS.get(status, "server error" if status >= 500 else "error")
            reason, said = f"HTTP {status} {reason}", f"HTTP {status}"
            if status not in (401, 403):  # auth errors may echo part of the key
                message = _one_line(_status_message(exc))
                reason, said = f"{reason}: {message}", f"{said}: {message}"
            return _status_kind(status), reason, said
        return FailureKind.OTHER, _one_line(str(exc)), _one_line(str(exc))


def _status_kind(status: int) -> FailureKind:
    kinds = {
        401: FailureKind.AUTH,
        403: FailureKind.PERMISSION,
        404: FailureKind.NOT_FOUND,
        408: FailureKind.TIMEOUT,
        429: FailureKind.RATE_LIMITED,
    }
    return kinds.get(status, FailureKind.SERVER if status >= 500 else FailureKind.OTHER)


def _status_message(exc: Any) -> str:
    """The endpoint's own message: an OpenAI-style ``{"error": {"message"}}``, Gemini's list
    around it (``[{"error": {"code", "message", "status"}}]``, its status named too), a plain
    ``{"error": "..."}`` (LM Studio, llama.cpp), the title of an HTML error page (a proxy's
    502) but never its markup; else the SDK's."""
    body = getattr(exc, "body", None)
    error = _error_object(body)
    message = error.get("message") if error is not None else None
    if isinstance(message, str) and message.strip():
        status = error.get("status") if error is not None else None
        if isinstance(status, str) and status.strip() and status not in message:
            return f"{message} ({status})"
        return message
    if isinstance(body, str) and body.strip():
        return _page_line(body) if _is_html(body) else body
    return str(exc.message)


def _error_object(body: object) -> dict[str, Any] | None:
    """The error object of an error body: the body itself (the SDK already took it out of
    ``{"error": ...}``), or the first element of a list around ``{"error": ...}`` (Gemini's
    OpenAI-compatible endpoint: n4ze3m/page-assist#406)."""
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0].get("error", body[0])
    return cast(dict[str, Any], body) if isinstance(body, dict) else None


def _is_html(body: str) -> bool:
    head = body.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html", "<head", "<body")) or "<html" in head


def _page_line(page: str) -> str:
    """An HTML error page in one line: its title (or first heading), without markup."""
    found = _HTML_TITLE.search(page)
    title = ""
    if found is not None:
        title = _TAG.sub(" ", html.unescape(_TAG.sub(" ", found.group(1) or found.group(2))))
        title = _one_line(title.replace("<", " ").replace(">", " "), 120)
    return f"{title} (an HTML error page)" if title else "an HTML error page"


def _worth_retrying(exc: Exception) -> bool:
    """Whether a failed request is worth another attempt: not one that timed out (its answer
    would be computed again from the start), but a broken connection, a 429, a 5xx, a 408 or
    409, unless the server says otherwise (``x-should-retry``, as the openai SDK obeys)."""
    import openai

    if isinstance(exc, openai.APITimeoutError):
        return False
    if isinstance(exc, openai.APIConnectionError):
        return True
    if isinstance(exc, openai.APIStatusError):
        said = exc.response.headers.get("x-should-retry")
        if said in ("true", "false"):
            return said == "true"
        return _transient(exc.status_code)
    return False


def _transient(code: object) -> bool:
    """Whether an error code names a failure that may pass (429, 5xx, 408, 409)."""
    if isinstance(code, str) and code.isdigit():
        code = int(code)
    return isinstance(code, int) and (code in _RETRIED_STATUSES or 500 <= code < 600)


def _asked_wait(exc: Exception) -> float | None:
    """The seconds the server asked to wait before another try: ``retry-after-ms``,
    ``Retry-After`` (seconds or a date), or Google's ``RetryInfo.retryDelay`` in the body
    (``"details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay":
    "37s"}]``); None: it asked for nothing."""
    import openai

    if not isinstance(exc, openai.APIStatusError):
        return None
    headers = exc.response.headers
    for name, unit in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds: float | None = float(value) * unit
        except ValueError:
            seconds = _seconds_until(value)
        if seconds is not None and math.isfinite(seconds):
            return max(seconds, 0.0)
    return _retry_delay(exc.body)


def _seconds_until(date: str) -> float | None:
    """Seconds from now until an HTTP date (a ``Retry-After`` date); None: not a date."""
    try:
        when = email.utils.parsedate_to_datetime(date)
    except (TypeError, ValueError, IndexError):
        return None
    return when.timestamp() - time.time()


def _retry_delay(body: object) -> float | None:
    """Google's ``RetryInfo.retryDelay`` of an error body, in seconds."""
    error = _error_object(body)
    details = error.get("details") if error is not None else None
    for detail in details if isinstance(details, list) else []:
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("rpc.RetryInfo"):
            found = _DURATION.fullmatch(str(detail.get("retryDelay", "")))
            if found is not None:
                return float(found.group(1))
    return None


def _backoff(retries: int) -> float:
    """The wait before retry ``retries + 1`` when the server asked for none."""
    wait: float = min(FIRST_BACKOFF * 2**retries, MAX_BACKOFF)
    return wait * (1 - 0.25 * random.random())


def _broken_connection(cause: BaseException | None) -> str | None:
    """What broke a connection after the request went out (None: it never connected): a
    body cut mid-way (httpx's ``RemoteProtocolError``: "peer closed connection without
    sending complete message body"), a server that closed without answering, a reset."""
    names = {kind.__name__ for kind in type(cause).__mro__} if cause is not None else set()
    said = _one_line(str(cause), 160)
    if "RemoteProtocolError" in names:
        if "complete message body" in said:
            return f"the connection closed before the whole answer arrived ({said})"
        return f"the server closed the connection without answering ({said})"
    if names & {"ReadError", "WriteError"}:
        return f"the connection broke off while waiting for the answer ({said or 'reset'})"
    return None


def _names_json_mode(exc: Any) -> bool:
    """Whether a 400 is the endpoint refusing ``response_format`` (its message or ``param``
    names it), not a problem of the request itself (context length, content filter)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and body.get("param") in ("response_format", "json_schema"):
        return True
    return bool(_JSON_MODE_REFUSED.search(f"{_status_message(exc)} {exc.message}"))


def _names_max_tokens(exc: Any) -> bool:
    """Whether a 400 is the endpoint refusing ``max_tokens`` by that name (its ``param``, or a
    message that points to ``max_completion_tokens``)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and body.get("param") == "max_tokens":
        return True
    return "max_completion_tokens" in f"{_status_message(exc)} {exc.message}"


def _not_a_completion(content_type: str) -> str:
    """Why a 200 answer that is not a chat completion failed, and what to check."""
    kind = content_type.split(";")[0].strip() or "no content type"
    if kind == "text/event-stream":
        return (
            "answered with a stream (text/event-stream) to a request that asked for none; "
            "check that OPENAI_BASE_URL is the API's base URL, not a proxy that always streams"
        )
    return (
        f"answered {kind} instead of a chat completion; check that OPENAI_BASE_URL is the "
        "API's base URL (usually ending in /v1), not a web page"
    )


def _first_choice(response: Any) -> Any:
    choices = getattr(response, "choices", None)
    return choices[0] if isinstance(choices, list) and choices else None


def _no_choice(response: Any) -> tuple[str, object]:
    """Why an answer without choices failed, and the error code it carries: the error (some
    servers answer HTTP 200 with ``{"error": ...}``), a prompt the content filter stopped, or
    nothing."""
    extra = getattr(response, "model_extra", None) or {}
    error = extra.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        code = error.get("code") if isinstance(error, dict) else None
        return f"answered HTTP 200 with an error: {_one_line(str(message))}", code
    if extra.get("prompt_filter_results"):
        return "answered no choices: the provider's content filter stopped the prompt", None
    return "answered no choices", None


def _extra(item: Any) -> dict[str, Any]:
    """The fields of an SDK object beyond OpenAI's schema (``reasoning_content``, a choice's
    ``error``)."""
    extra = getattr(item, "model_extra", None)
    return extra if isinstance(extra, dict) else {}


def _finish_reason(choice: Any) -> str:
    """A choice's ``finish_reason`` as a short word ("" when there is none)."""
    reason = getattr(choice, "finish_reason", None)
    return _REASON_CHARS.sub("", str(reason))[:40].lower() if reason else ""


def _reasoning_field(message: Any) -> str | None:
    """The field a message carries its reasoning in apart from ``content``:
    ``reasoning_content`` (DeepSeek's API, vLLM's reasoning parsers) or ``reasoning``
    (OpenRouter, Ollama's OpenAI API, newer vLLM); None when neither holds text."""
    extra = _extra(message)
    for name in ("reasoning_content", "reasoning"):
        value = extra.get(name)
        if isinstance(value, str) and value.strip():
            return name
    return None


def _why_empty(choice: Any, finish: str, reasoned: Reasoned) -> str:
    message = getattr(choice, "message", None)
    if getattr(message, "tool_calls", None) or finish in ("tool_calls", "function_call"):
        return "answered with a tool call instead of text"
    refusal = getattr(message, "refusal", None)
    if refusal:
        return f"refused to answer: {_one_line(str(refusal))}"
    field = _reasoning_field(message)
    if reasoned.unclosed or field:
        where = (
            f"a {reasoned.unclosed} block never closed"
            if reasoned.unclosed
            else f"{field}, content empty"
        )
        if finish == "length":
            return (
                f"answered only reasoning ({where}): its output tokens ran out before it "
                "answered (finish_reason length); allow more output tokens or less reasoning "
                "effort"
            )
        return (
            f"answered only reasoning ({where}): the model never ended its reasoning, or the "
            "server's reasoning parser does not fit the model (vLLM, SGLang: check "
            "--reasoning-parser)"
        )
    if finish == "length":
        return "used all its output tokens before answering (finish_reason length)"
    if reasoned.reasoned:
        return "returned an empty answer after its reasoning"
    return "returned an empty answer"


class LLMClients:
    """The planner, writer and verifier models of one process (the same object when
    identical)."""

    def __init__(
        self, planner: ChatModel, writer: ChatModel, verifier: ChatModel | None = None
    ) -> None:
        self.planner = planner
        self.writer = writer
        #: Checks a report's claims (``FATHOM_VERIFIER_MODEL`` at ``FATHOM_VERIFIER_BASE_URL``
        #: with ``FATHOM_VERIFIER_API_KEY``; the planner by default).
        self.verifier = verifier or planner

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        *,
        ssl_context: ssl.SSLContext | None = None,
        metrics: Metrics | None = None,
    ) -> LLMClients:
        settings.require_llm()
        common: dict[str, Any] = {
            "timeout": settings.llm_timeout,
            "max_retries": settings.llm_max_retries,
            "json_mode": settings.llm_json_mode,
            "ssl_context": ssl_context,
            "metrics": metrics,
        }
        planner_key = settings.openai_api_key or ""
        planner = ChatModel(
            model=settings.planner_model,
            api_key=planner_key,
            base_url=settings.openai_base_url,
            **common,
        )
        writer_spec = (
            settings.effective_writer_model,
            settings.effective_writer_base_url,
            settings.effective_writer_api_key or planner_key,
        )
        verifier = None
        verifier_spec = (
            settings.effective_verifier_model,
            settings.effective_verifier_base_url,
            settings.effective_verifier_api_key or planner_key,
        )
        if verifier_spec != (settings.planner_model, settings.openai_base_url, planner_key):
            model, base_url, api_key = verifier_spec
            verifier = ChatModel(model=model, api_key=api_key, base_url=base_url, **common)
        if writer_spec == (settings.planner_model, settings.openai_base_url, planner_key):
            return cls(planner, planner, verifier)
        model, base_url, api_key = writer_spec
        writer = ChatModel(model=model, api_key=api_key, base_url=base_url, **common)
        return cls(planner, writer, verifier)

    async def aclose(self) -> None:
        await self.planner.aclose()
        if self.writer is not self.planner:
            await self.writer.aclose()
        if self.verifier is not self.planner:
            await self.verifier.aclose()
