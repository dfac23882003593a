"""A fake OpenAI-compatible chat-completions server with a deterministic "smart" default.

The planner gets plausible `{"nextSearchTopic", "shouldContinue"}` JSON that advances with the
number of topics already searched; the writer gets a Markdown report citing the numbered
sources it was given. Failures are scripted per role so retry and degradation paths can be
tested against the real `openai` SDK.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from starlette import responses
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tests.fakes.server import BackgroundServer

PLANNER_MARKER = "nextSearchTopic"
GRAPH_MARKER = '"finish"'
ANSWER_MARKER = "Sub-question:"
#: The verifier's request (``core.claims.verifier``): its answer's key.
VERIFIER_MARKER = '"verdicts"'
#: The reviser's request (the claim check's fixes): its answer's key.
REVISER_MARKER = '"revisions"'
#: ``fathom eval``'s request about a report's expected facts: its answer's key.
FACTS_MARKER = '"covered"'
CLAIM_LINE = re.compile(r"^Claim (\d+): ", re.MULTILINE)
FACT_LINE = re.compile(r"^Fact (\d+): (.+)$", re.MULTILINE)
#: A claim of a verifier's request: its number, its text and the sources it cites.
CLAIM_BLOCK = re.compile(r"^Claim (\d+): (.*)\nCited: (.*)$", re.MULTILINE)
#: The draft a reasoning block quotes (``FakeLLM.reasoning``): an answer to every role that,
#: taken for the real one, stops the research, plans nothing, judges and revises nothing.
DRAFT = (
    '{"nextSearchTopic": null, "shouldContinue": false, "nodes": [], "finish": true, '
    '"verdicts": [], "revisions": []}'
)
#: What the mixed writer invents: a number no fake source has.
INVENTED_NUMBER = "417%"
ASPECTS = (
    "overview",
    "recent developments",
    "key players",
    "risks and limitations",
    "regulation",
    "outlook",
    "costs and economics",
    "case studies",
)
SOURCE_LINE = re.compile(r"^\[(\d+)\]", re.MULTILINE)


@dataclass(frozen=True)
class Reply:
    """Answer 200 with exactly this assistant content (a string, a list of content parts or
    None), finish reason, extra message fields (``tool_calls``, ``refusal``,
    ``reasoning_content``) and extra choice fields (OpenRouter's ``error``)."""

    content: str | list[dict[str, Any]] | None
    finish_reason: str | None = "stop"
    message: dict[str, Any] = field(default_factory=dict)
    choice: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Raw:
    """Answer with exactly this body and content type: what a real server sends that is not
    a chat completion (an HTML page, an event stream, a 200 with an error)."""

    body: str
    content_type: str = "application/json"
    status: int = 200


@dataclass(frozen=True)
class Fail:
    """Answer with an HTTP error (body defaults to an OpenAI-style error object)."""

    status: int
    body: dict[str, Any] | list[Any] | None = None
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class Hang:
    """Sleep this long, then answer with the default behaviour."""

    seconds: float


@dataclass(frozen=True)
class Held:
    """Answer with the default behaviour once ``gate`` is set (at most ``HELD_LIMIT`` real
    seconds): a call a test holds exactly as long as it needs, however loaded the machine."""

    gate: threading.Event


@dataclass(frozen=True)
class Trickle:
    """Answer 200 at once, then only a blank line every ``every`` real seconds, as DeepSeek
    keeps a busy non-streamed request alive ("Non-streaming requests: Continuously return
    empty lines", api-docs.deepseek.com/quick_start/rate_limit); after ``lines`` of them the
    answer follows (``then``, else the default one), or with ``lines=None`` nothing does until
    the client leaves (at most ``TRICKLE_LIMIT`` seconds)."""

    every: float = 0.01
    lines: int | None = None
    then: Reply | None = None


@dataclass(frozen=True)
class Silent:
    """Answer 200 with its headers at once, then send nothing until the client leaves (at most
    ``TRICKLE_LIMIT`` seconds): a server that stalls after starting its answer."""


@dataclass(frozen=True)
class Cut:
    """Answer 200 with the default completion's ``Content-Length``, send only ``share`` of the
    body and close the connection: what httpx reports as "peer closed connection without
    sending complete message body"."""

    share: float = 0.5


Response = Reply | Fail | Hang | Held | Raw | Trickle | Silent | Cut
#: The longest a held answer waits for its gate (real seconds).
HELD_LIMIT = 30.0
#: The longest a trickling or silent answer goes on (real seconds) if its client never leaves.
TRICKLE_LIMIT = 60.0


@dataclass(frozen=True)
class RecordedRequest:
    body: dict[str, Any]
    role: str
    time: float = field(default_factory=time.time)


def error_body(
    message: str, type_: str = "server_error", param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": None}}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def _last_user(body: dict[str, Any]) -> str:
    users = [_text(m.get("content")) for m in _messages(body) if m.get("role") == "user"]
    return users[-1] if users else ""


def _first_user(body: dict[str, Any]) -> str:
    """The request's first user message (a re-asked request adds the model's answer and what
    was wrong with it after it)."""
    users = [_text(m.get("content")) for m in _messages(body) if m.get("role") == "user"]
    return users[0] if users else ""


def _topic(prompt: str) -> str:
    if "Topic:" in prompt:
        return prompt.split("Topic:", 1)[1].split("\n", 1)[0].strip()
    return next((line.strip()[:80] for line in prompt.splitlines() if line.strip()), "research")


def _searched(prompt: str) -> list[str]:
    lines = prompt.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Topics already searched:":
            topics = []
            for item in lines[i + 1 :]:
                if not item.strip():
                    break
                if item.startswith("- "):
                    topics.append(item[2:].strip())
            return topics
    return []


def graph_plan(prompt: str) -> str:
    """The default graph plan: turn 1 adds two independent sub-questions and a third after
    both; turn 2 adds one after the third; then it finishes."""
    question = prompt.split("Question:", 1)[1].split("\n", 1)[0].strip()
    graph = prompt.split("The graph so far", 1)[1]
    known = re.findall(r"^\[([\w-]+)\] ", graph, re.MULTILINE)
    nodes: list[dict[str, Any]] = []
    if not known:
        nodes = [
            {"name": "background", "question": f"{question} background", "after": []},
            {"name": "state", "question": f"{question} current state", "after": []},
            {
                "name": "compare",
                "question": f"{question} compared with alternatives",
                "after": ["background", "state"],
            },
        ]
    elif "outlook" not in known:
        nodes = [{"name": "outlook", "question": f"{question} outlook", "after": ["compare"]}]
    return json.dumps({"nodes": nodes, "finish": not nodes}, ensure_ascii=False)


def _first_snippets(prompt: str, sources: int = 3) -> list[tuple[str, str]]:
    """The snippets of the first ``sources`` sources (``(search: <topic>) <snippet>``, an
    internal document's ``(internal source <name>, search: <topic>) <snippet>``)."""
    found: list[tuple[str, str]] = []
    for block in re.split(r"\n(?=\[\d+\])", prompt):
        number = SOURCE_LINE.match(block)
        snippet = re.search(
            r"^    \((?:internal source [^,]*, )?search: .*?\) (.+)$", block, re.MULTILINE
        )
        if number and snippet and len(found) < sources:
            found.append((number.group(1), snippet.group(1)))
    return found


def _first_passages(prompt: str, sources: int = 2) -> list[tuple[str, str]]:
    """The first passage read from the page of the first ``sources`` sources that have one
    (the writer quotes them, as a model writing from evidence would)."""
    found: list[tuple[str, str]] = []
    for block in re.split(r"\n(?=\[\d+\])", prompt):
        number = SOURCE_LINE.match(block)
        passage = re.search(r"^    > (.+)$", block, re.MULTILINE)
        if number and passage and len(found) < sources:
            found.append((number.group(1), passage.group(1)))
    return found


def mixed_report(prompt: str, topic: str, invent: bool = True) -> str:
    """A report that cites as a careless model does: a claim copied from its source and cited
    to it, one copied from the second source but cited to the first, one stating a number no
    source has (unless not ``invent``), one citing nothing, and one more cited correctly (a
    snippet). For a Chinese topic the invented and uncited claims are Chinese sentences in one
    paragraph with the others, so that the claims are split at Chinese full stops."""
    copied = _first_passages(prompt, 2) or _first_snippets(prompt, 2)
    snippets = _first_snippets(prompt, 3)
    (n1, first), (_, second) = copied[0], copied[1 % len(copied)]
    first, second = _first_sentence(first), _first_sentence(second)
    n3, third = snippets[-1]
    if re.search(r"[\u4e00-\u9fff]", topic):
        invented = f"{topic}去年的市场规模增长了{INVENTED_NUMBER}[{n1}]。" if invent else ""
        return (
            f"# 报告：{topic}\n\n## 主要发现\n\n"
            f"{first} [{n1}] {second} [{n1}] {invented}"
            f"专家预计{topic}会越来越受关注。{third} [{n3}]\n"
        )
    invented = f"- The market for {topic} grew by {INVENTED_NUMBER} last year [{n1}].\n"
    return (
        f"# Report: {topic}\n\n## Main findings\n\n"
        f"- {first} [{n1}]\n- {second} [{n1}]\n{invented if invent else ''}"
        f"- Experts expect {topic} to draw more attention every year.\n"
        f"- {third} [{n3}]\n"
    )


def _first_sentence(text: str) -> str:
    """The first sentence of a passage (a passage may hold a whole page)."""
    match = re.match(r"(.+?[.!?])(?:\s|$)", text)
    return match.group(1) if match else text


def _plain(text: str) -> str:
    """``text`` without citations, closing marks, case or spacing (what the judge compares)."""
    text = re.sub(r"\[\d+\]", " ", text)
    return " ".join(text.lower().split()).strip(" .。")


def judged(prompt: str, rewrite: bool = False) -> list[dict[str, Any]]:
    """The verdicts of a careful verifier on the claims of ``prompt``: supported when a cited
    source's passages contain the claim, else unsupported and naming the source that does
    (null when none does); with ``rewrite``, an unsupported claim's ``text`` too, written as
    the fake reviser writes it (the sentence as it was, with its citations: the check then
    marks it as not verified, unless a source it was shown plainly says it)."""
    sources: dict[int, str] = {}
    for block in re.split(r"\n(?=\[\d+\] )", prompt):
        number = SOURCE_LINE.match(block)
        if number:
            passages = re.findall(r"^    > (.+)$", block, re.MULTILINE)
            sources[int(number.group(1))] = " | ".join(_plain(p) for p in passages)
    verdicts: list[dict[str, Any]] = []
    for index, text, cited in CLAIM_BLOCK.findall(prompt):
        claim, cites = _plain(text), {int(n) for n in re.findall(r"\d+", cited)}
        saying = [n for n, said in sources.items() if claim and claim in said]
        if cites & set(saying):
            verdicts.append({"claim": int(index), "verdict": "supported", "source": None})
        else:
            other = saying[0] if saying else None
            verdict = {"claim": int(index), "verdict": "unsupported", "source": other}
            verdicts.append({**verdict, "text": f"{text} {cited}"} if rewrite else verdict)
    return verdicts


#: The shapes a verifier's answer takes besides the contract (``FakeLLM.verifier_shape``), each
#: a habit of real models (tests/test_claims.py names where each is seen): ids counted from 0,
#: the list under another key, ``"id"`` for ``"claim"``, no verdicts, yes/no words for
#: verdicts, a claim left out, one answered twice, and the JSON cut off at the output limit
#: (``cut_off``: ``finish_reason: "length"``; ``cut_off_stop``: cut by a proxy that still
#: says ``stop``), ids of claims it was not asked about (``unknown_ids``: numbered on past the
#: last one) and a rewrite's ``text`` given as a list of sentences (``text_as_list``).
VERIFIER_SHAPES = (
    "zero_based",
    "unknown_ids",
    "renamed_key",
    "id_key",
    "empty",
    "yes_no",
    "missing",
    "duplicate",
    "cut_off",
    "cut_off_stop",
    "text_as_list",
)


def misshapen(verdicts: list[dict[str, Any]], shape: str) -> Reply:
    """The verifier's answer ``{"verdicts": verdicts}`` in one of :data:`VERIFIER_SHAPES`
    (``contract``: as it is)."""
    entries = [dict(v) for v in verdicts]
    key = "verdicts"
    if shape == "zero_based":
        entries = [{**v, "claim": v["claim"] - 1} for v in entries]
    elif shape == "unknown_ids":
        entries = [{**v, "claim": v["claim"] + len(entries)} for v in entries]
    elif shape == "text_as_list":
        entries = [{**v, "text": [v.get("text") or v["verdict"]]} for v in entries]
    elif shape == "renamed_key":
        key = "results"
    elif shape == "id_key":
        entries = [{"id": v.pop("claim"), **v} for v in entries]
    elif shape == "empty":
        entries = []
    elif shape == "yes_no":
        words = {"supported": "yes", "partial": "partly"}
        entries = [{**v, "verdict": words.get(v["verdict"], "not supported")} for v in entries]
    elif shape == "missing":
        entries = entries[:-1]
    elif shape == "duplicate":
        entries = [*entries, {**entries[0], "verdict": "partial"}] if entries else entries
    elif shape not in ("contract", "cut_off", "cut_off_stop"):
        raise ValueError(f"unknown verifier shape {shape!r}")
    text = json.dumps({key: entries})
    if shape.startswith("cut_off"):
        cut = text[: max(len(text) * 2 // 3, 12)]
        return Reply(cut, "length" if shape == "cut_off" else "stop")
    return Reply(text)


def covered(prompt: str) -> list[dict[str, Any]]:
    """Which facts of ``prompt`` its report states: "yes" when the report holds the fact's
    words (case aside), as a literal judge would."""
    report = _plain(prompt.split("Report (untrusted data", 1)[-1])
    return [
        {"fact": int(i), "covered": "yes" if _plain(fact) in report else "no"}
        for i, fact in FACT_LINE.findall(prompt)
    ]


def response_from_json(data: dict[str, Any]) -> Response:
    kind = data.get("kind")
    if kind == "reply":
        return Reply(str(data["content"]))
    if kind == "raw":
        return Raw(str(data["body"]), str(data.get("content_type", "application/json")))
    if kind == "fail":
        return Fail(int(data["status"]), data.get("body"), data.get("headers"))
    if kind == "hang":
        return Hang(float(data["seconds"]))
    raise ValueError(f"unknown response kind {kind!r}")


class FakeLLM:
    """State and behaviour of the fake; every method is safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RecordedRequest] = []
        self._scripts: dict[str, deque[Response]] = {}
        self.latency = 0.0
        self.stop_after: int | None = None
        self.reject_response_format = False
        #: How the writer cites: ``well`` (each cited line copies what its source says) or
        #: ``mixed`` (:func:`mixed_report`: also a miscited, an invented and an uncited claim;
        #: the verifier then judges by what the sources say, :func:`judged`) or ``miscited``
        #: (the same without the invented claim).
        self.citing = "well"
        #: How the verifier judges when the writer cites well: ``lenient`` (every claim
        #: supported) or ``literal`` (:func:`judged`: it reads each claim and the passages of
        #: its sources, as ``fathom eval --judge-check`` needs of an offline judge).
        self.judge = "lenient"
        #: The shape of the verifier's answers: ``contract``, or one of
        #: :data:`VERIFIER_SHAPES` (its re-asked requests too).
        self.verifier_shape = "contract"
        #: Whether the verifier gives a rewrite (``text``) of each claim it finds unsupported,
        #: as the contract allows (:func:`judged`); off: a verifier model that ignores the key,
        #: whose failing claims go to the reviser.
        self.verifier_rewrites = True
        #: Requests being answered right now, and the most ever (concurrency checks; the app
        #: runs on one event loop).
        self.in_flight = 0
        self.max_in_flight = 0
        #: Trickling or silent answers begun, blank lines they sent, and those whose client
        #: left before they ended.
        self.streams = 0
        self.trickled = 0
        self.abandoned = 0
        #: The (opening, closing) tags of a reasoning block every default answer starts with,
        #: as a reasoning model served without a reasoning parser writes it (an empty opening:
        #: the chat template opened it). The block quotes :data:`DRAFT`, a JSON object that,
        #: taken for the answer, would end the research.
        self.reasoning: tuple[str, str] | None = None

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def requests_for(self, role: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.role == role]

    def script(self, role: str, *responses: Response) -> None:
        with self._lock:
            self._scripts.setdefault(role, deque()).extend(responses)

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()
            self._scripts.clear()
        self.latency, self.stop_after, self.reject_response_format = 0.0, None, False
        self.citing, self.judge = "well", "lenient"
        self.verifier_shape = "contract"
        self.verifier_rewrites = True
        self.in_flight = self.max_in_flight = 0
        self.streams = self.trickled = self.abandoned = 0
        self.reasoning = None

    def record(self, body: dict[str, Any]) -> str:
        texts = [_text(m.get("content")) for m in _messages(body)]
        planner = "response_format" in body or any(PLANNER_MARKER in t for t in texts)
        if any(FACTS_MARKER in t for t in texts):
            role = "facts"
        elif any(REVISER_MARKER in t for t in texts):
            role = "reviser"
        elif any(VERIFIER_MARKER in t for t in texts):
            role = "verifier"
        elif any(GRAPH_MARKER in t for t in texts):
            role = "graph_planner"
        elif any(ANSWER_MARKER in t for t in texts):
            role = "answerer"
        else:
            role = "planner" if planner else "writer"
        with self._lock:
            self._requests.append(RecordedRequest(body, role))
        return role

    def next_scripted(self, role: str) -> Response | None:
        with self._lock:
            queue = self._scripts.get(role)
            return queue.popleft() if queue else None

    def default_reply(self, role: str, body: dict[str, Any]) -> str | Reply:
        """What the fake answers unscripted: :meth:`default_answer`, or the verifier's verdicts
        in the shape :attr:`verifier_shape` says."""
        if role == "verifier" and self.verifier_shape != "contract":
            return misshapen(self._verdicts(_first_user(body)), self.verifier_shape)
        return self.default_answer(role, body)

    def default_answer(self, role: str, body: dict[str, Any]) -> str:
        answer = self._answer(role, body)
        if self.reasoning is None:
            return answer
        opening, closing = self.reasoning
        return f"{opening}\nA first draft: {DRAFT}\nNo, I can do better.\n{closing}\n\n{answer}"

    def _verdicts(self, prompt: str) -> list[dict[str, Any]]:
        """The verdicts on the claims of a verifier's ``prompt``: as the sources say
        (:func:`judged`) when the writer cites carelessly or the judge is ``literal``, else
        every claim supported."""
        if self.citing in ("mixed", "miscited") or self.judge == "literal":
            return judged(prompt, rewrite=self.verifier_rewrites)
        return [
            {"claim": int(i), "verdict": "supported", "source": None}
            for i in CLAIM_LINE.findall(prompt)
        ]

    def _answer(self, role: str, body: dict[str, Any]) -> str:
        prompt = _last_user(body)
        if role == "facts":
            return json.dumps({"facts": covered(prompt)})
        if role == "reviser":  # each sentence kept as it was: they are marked as not verified
            revisions = [
                {"claim": int(i), "text": f"{text} {cited}"}
                for i, text, cited in CLAIM_BLOCK.findall(_first_user(body))
            ]
            return json.dumps({"revisions": revisions}, ensure_ascii=False)
        if role == "verifier":  # (a re-asked request: the claims are in its first message)
            return json.dumps({"verdicts": self._verdicts(_first_user(body))})
        if role == "graph_planner":
            return graph_plan(prompt)
        if role == "answerer":  # cites what it copies, as the writer does
            question = prompt.split("Sub-question:", 1)[1].split("\n", 1)[0].strip()
            copied = (_first_passages(prompt, 1) or _first_snippets(prompt, 1))[:1]
            cited = "".join(f" {text} [{n}]" for n, text in copied)
            return f"The sources answer {question} clearly.{cited}"
        topic = _topic(prompt)
        if role == "planner":
            k = len(_searched(prompt))
            if self.stop_after is not None and k >= self.stop_after:
                return json.dumps({"nextSearchTopic": None, "shouldContinue": False})
            aspect = ASPECTS[k % len(ASPECTS)]
            if k >= len(ASPECTS):
                aspect += f" (part {k // len(ASPECTS) + 1})"
            nxt = f"{topic} — {aspect}"
            return json.dumps({"nextSearchTopic": nxt, "shouldContinue": True}, ensure_ascii=False)
        if self.citing in ("mixed", "miscited"):
            return mixed_report(prompt, topic, invent=self.citing == "mixed")
        # A writer that cites correctly: each cited line says what its source says (a snippet
        # or a passage, copied), so the claim check settles it without a model call.
        said = "".join(f"- {text} [{n}]\n" for n, text in _first_snippets(prompt))
        quoted = "".join(f"- {text} [{n}]\n" for n, text in _first_passages(prompt))
        return (
            f"# Report: {topic}\n\n## Executive summary\n\n"
            f"This report summarises what the searches found about {topic}.\n\n"
            f"## Main findings\n\n- The sources describe the current state of {topic}.\n"
            f"{quoted}{said}\n"
            "## Conclusions and recommendations\n\n"
            "Monitor developments and revisit the question as new evidence appears.\n\n"
            "## Open questions\n\nLong-term effects remain uncertain.\n"
        )


def _completion(body: dict[str, Any], content: str | Reply) -> dict[str, Any]:
    reply = content if isinstance(content, Reply) else Reply(content)
    prompt_chars = sum(len(_text(m.get("content"))) for m in _messages(body))
    prompt_tokens = math.ceil(prompt_chars / 4)
    completion_tokens = math.ceil(len(_text(reply.content)) / 4)
    # A cap on the answer is honoured as OpenAI's API does: the answer is cut at that many
    # tokens and its finish reason is "length".
    cap = body.get("max_completion_tokens") or body.get("max_tokens")
    if isinstance(cap, int) and isinstance(reply.content, str) and completion_tokens > cap:
        reply = replace(reply, content=reply.content[: cap * 4], finish_reason="length")
        completion_tokens = cap
    return {
        "id": f"chatcmpl-fake-{uuid.uuid4().hex[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model") or "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.content, **reply.message},
                "finish_reason": reply.finish_reason,
                "logprobs": None,
                **reply.choice,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def build_llm_app(fake: FakeLLM) -> Starlette:
    async def completions(request: Request) -> responses.Response:
        try:
            body = json.loads(await request.body())
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return JSONResponse(error_body("invalid JSON body", "invalid_request_error"), 400)
        role = fake.record(body)
        auth = request.headers.get("authorization", "")
        if not auth.startswith("Bearer ") or not auth[7:].strip():
            msg = "You didn't provide an API key."
            return JSONResponse(error_body(msg, "invalid_request_error"), 401)
        if fake.reject_response_format and "response_format" in body:
            msg = "response_format is not supported"
            return JSONResponse(error_body(msg, "invalid_request_error", "response_format"), 400)
        if fake.latency > 0:
            fake.in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
            try:
                await asyncio.sleep(fake.latency)
            finally:
                fake.in_flight -= 1
        scripted = fake.next_scripted(role)
        if isinstance(scripted, Fail):
            payload = scripted.body or error_body(f"fake error {scripted.status}")
            return JSONResponse(payload, scripted.status, headers=scripted.headers)
        if isinstance(scripted, Hang):
            await asyncio.sleep(scripted.seconds)
        if isinstance(scripted, Held):
            await asyncio.to_thread(scripted.gate.wait, HELD_LIMIT)
        if isinstance(scripted, Reply):
            return JSONResponse(_completion(body, scripted))
        if isinstance(scripted, Raw):
            headers = {"content-type": scripted.content_type}
            return responses.Response(scripted.body, scripted.status, headers=headers)
        if isinstance(scripted, Trickle | Silent):
            answer = scripted.then if isinstance(scripted, Trickle) and scripted.then else None
            completion = _completion(body, answer or fake.default_reply(role, body))
            return responses.StreamingResponse(
                _trickle(fake, scripted, json.dumps(completion), request.is_disconnected),
                media_type="application/json",
            )
        if isinstance(scripted, Cut):
            data = json.dumps(_completion(body, fake.default_reply(role, body))).encode()
            return CutResponse(data, int(len(data) * scripted.share))
        return JSONResponse(_completion(body, fake.default_reply(role, body)))

    async def models(request: Request) -> JSONResponse:
        data = [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}]
        return JSONResponse({"object": "list", "data": data})

    async def script(request: Request) -> JSONResponse:
        data = await request.json()
        fake.script(data["role"], *(response_from_json(r) for r in data.get("responses", [])))
        return JSONResponse({"ok": True})

    async def config(request: Request) -> JSONResponse:
        data = await request.json()
        if "latency" in data:
            fake.latency = float(data["latency"])
        if "stop_after" in data:
            fake.stop_after = None if data["stop_after"] is None else int(data["stop_after"])
        if "reject_response_format" in data:
            fake.reject_response_format = bool(data["reject_response_format"])
        if "citing" in data:
            fake.citing = str(data["citing"])
        if "judge" in data:
            fake.judge = str(data["judge"])
        if "verifier_shape" in data:
            fake.verifier_shape = str(data["verifier_shape"])
        if "verifier_rewrites" in data:
            fake.verifier_rewrites = bool(data["verifier_rewrites"])
        return JSONResponse({"ok": True})

    async def requests(request: Request) -> JSONResponse:
        return JSONResponse([{"role": r.role, "body": r.body} for r in fake.requests])

    async def reset(request: Request) -> JSONResponse:
        fake.reset()
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/chat/completions", completions, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/models", models, methods=["GET"]),
            Route("/_fake/script", script, methods=["POST"]),
            Route("/_fake/config", config, methods=["POST"]),
            Route("/_fake/requests", requests, methods=["GET"]),
            Route("/_fake/reset", reset, methods=["POST"]),
        ]
    )


async def _trickle(
    fake: FakeLLM,
    how: Trickle | Silent,
    completion: str,
    gone: Callable[[], Awaitable[bool]],
) -> AsyncIterator[bytes]:
    """The body of a trickling or silent answer (:class:`Trickle`, :class:`Silent`); ``gone``:
    whether the client left (a silent answer writes nothing that would find out)."""
    ended = False
    fake.streams += 1
    try:
        if isinstance(how, Trickle):
            sent = 0
            started = time.monotonic()
            while how.lines is None or sent < how.lines:
                if time.monotonic() - started > TRICKLE_LIMIT:
                    return
                yield b"\n"
                sent += 1
                fake.trickled += 1
                await asyncio.sleep(how.every)
            ended = True
            yield completion.encode()
        else:
            started = time.monotonic()
            while not await gone() and time.monotonic() - started < TRICKLE_LIMIT:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
    finally:
        if not ended:
            fake.abandoned += 1


class CutResponse(responses.Response):
    """Headers that promise ``body``, then only its first ``sent`` bytes and a closed
    connection (uvicorn closes it when the app returns mid-body)."""

    def __init__(self, body: bytes, sent: int) -> None:
        super().__init__(body, 200, media_type="application/json")
        self.sent = sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        await send(
            {"type": "http.response.body", "body": self.body[: self.sent], "more_body": True}
        )


class FakeLLMServer(BackgroundServer):
    """`with FakeLLMServer() as llm: AsyncOpenAI(base_url=llm.base_url, api_key="k")`."""

    def __init__(self, fake: FakeLLM | None = None, host: str = "127.0.0.1", port: int = 0) -> None:
        self.fake = fake or FakeLLM()
        super().__init__(build_llm_app(self.fake), host, port)

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"
