"""The chat-completion client for any OpenAI-compatible endpoint.

The engine needs two things from a model: free text (the report) and small JSON decisions
(the planner). Endpoints differ in what they support (``response_format`` flavours, usage
reporting, reasoning ``<think>`` preambles), so this module hides those differences and turns
every failure into :class:`LLMError`, which the engine can degrade on instead of crashing.

``openai`` is imported lazily: importing it costs most of a second, and CLI commands that never
talk to a model (``fathom thread list``, ``--help``) should not pay for it.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
import types
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast, get_args
from urllib.parse import urlsplit

from pydantic import BaseModel

from core.llm.answers import Answer, BadJSON, message_text, parse_answer, strip_harmony, strip_think
from core.llm.errors import FailureKind, LLMError, LLMInvalidJSON, public_endpoint
from core.models import Usage

if TYPE_CHECKING:
    import ssl

    import httpx
    from openai import AsyncOpenAI

    from core.config import Settings
    from core.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T", bound=BaseModel)
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
    ) -> None:
        """``ssl_context``: share one TLS context between clients (see core.runtime);
        ``metrics``: where calls and tokens are counted (by model).

        Without it (and without ``http_client``) the SDK builds its own client and loads a
        CA bundle for it, about 30 ms even for an ``http://`` endpoint.
        """
        openai = _import_openai()

        if json_mode not in get_args(JsonMode):
            raise ValueError(f"json_mode must be one of {get_args(JsonMode)}, not {json_mode!r}")
        self.model = model
        self._metrics = metrics
        self.json_mode: JsonMode = cast(JsonMode, json_mode)
        self.timeout = timeout
        self._api_key = api_key
        client: Any = http_client
        if client is None and ssl_context is not None:
            # The SDK's own defaults (limits, redirects), with the shared TLS context.
            client = openai.DefaultAsyncHttpxClient(verify=ssl_context, timeout=timeout)
        self._client: AsyncOpenAI = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            timeout=timeout,
            max_retries=max_retries,
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
        """The assistant's answer to ``messages``; raises :class:`LLMError` on failure."""
        extra: dict[str, Any] = {}
        if temperature is not None:
            extra["temperature"] = temperature
        if max_tokens is not None:
            extra["max_tokens"] = max_tokens
        return await self._create(messages, usage, extra)

    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: type[T],
        *,
        usage: Usage,
        schema_name: str = "answer",
    ) -> T:
        """Ask for one JSON object and validate it as ``schema``; re-asks once on garbage
        (an answer cut off at the output limit is garbage too)."""
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
        """One completion call (the SDK retries transient failures inside it)."""
        import openai

        usage.llm_calls += 1
        try:
            raw = await self._client.chat.completions.with_raw_response.create(
                model=self.model, messages=cast(Any, messages), **extra
            )
            response: Any = raw.parse()
        except openai.APIError as exc:
            self._count(False)
            raise self._error(exc) from exc
        except ValueError as exc:  # declared JSON, but the body is not
            self._count(False)
            raise self._bad_answer(
                f"answered HTTP 200 with a body that is not JSON ({_one_line(str(exc), 80)}); "
                "check that OPENAI_BASE_URL is the API's base URL (usually ending in /v1)"
            ) from exc
        if not hasattr(response, "choices"):  # an HTML page, an SSE stream: not a completion
            self._count(False)
            raise self._bad_answer(_not_a_completion(raw.headers.get("content-type", "")))
        choice = _first_choice(response)
        content = message_text(getattr(getattr(choice, "message", None), "content", None))
        self._count_usage(response, messages, content, usage, ok=choice is not None)
        if choice is None:
            raise self._bad_answer(_no_choice(response))
        finish = str(getattr(choice, "finish_reason", None) or "")
        text = strip_think(strip_harmony(content))
        if finish == "content_filter":
            raise self._bad_answer("had its answer withheld by the provider's content filter")
        if not text:
            raise self._bad_answer(_why_empty(choice, finish))
        return Answer(text, truncated=finish == "length")

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

    def _error(self, exc: Exception) -> LLMError:
        """The :class:`LLMError` of a failed call: short, one line and key-free."""
        kind, reason, said = self._describe(exc)
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
    """The endpoint's own message (``{"error": {"message"}}``), else the SDK's."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("message"), str) and body["message"]:
        return str(body["message"])
    if isinstance(body, str) and body.strip():  # {"error": "..."} (LM Studio, llama.cpp)
        return body
    return str(exc.message)


def _names_json_mode(exc: Any) -> bool:
    """Whether a 400 is the endpoint refusing ``response_format`` (its message or ``param``
    names it), not a problem of the request itself (context length, content filter)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and body.get("param") in ("response_format", "json_schema"):
        return True
    return bool(_JSON_MODE_REFUSED.search(f"{_status_message(exc)} {exc.message}"))


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


def _no_choice(response: Any) -> str:
    """Why an answer without choices failed: the error it carries (some servers answer
    HTTP 200 with ``{"error": ...}``), a prompt the content filter stopped, or nothing."""
    extra = getattr(response, "model_extra", None) or {}
    error = extra.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else error
        return f"answered HTTP 200 with an error: {_one_line(str(message))}"
    if extra.get("prompt_filter_results"):
        return "answered no choices: the provider's content filter stopped the prompt"
    return "answered no choices"


def _why_empty(choice: Any, finish: str) -> str:
    message = getattr(choice, "message", None)
    if getattr(message, "tool_calls", None) or finish in ("tool_calls", "function_call"):
        return "answered with a tool call instead of text"
    refusal = getattr(message, "refusal", None)
    if refusal:
        return f"refused to answer: {_one_line(str(refusal))}"
    if finish == "length":
        return "used all its output tokens before answering (finish_reason length)"
    return "returned an empty answer"


class LLMClients:
    """The planner, writer and verifier models of one process (the same object when
    identical)."""

    def __init__(
        self, planner: ChatModel, writer: ChatModel, verifier: ChatModel | None = None
    ) -> None:
        self.planner = planner
        self.writer = writer
        #: Checks a report's claims (``FATHOM_VERIFIER_MODEL``; the planner by default).
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
        if settings.verifier_model and settings.verifier_model != settings.planner_model:
            verifier = ChatModel(
                model=settings.verifier_model,
                api_key=planner_key,
                base_url=settings.openai_base_url,
                **common,
            )
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
