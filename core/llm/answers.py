"""What a model answered, taken apart: its text without reasoning, and JSON from almost-JSON.

Endpoints differ in how they wrap an answer: a list of content parts (Mistral), reasoning
blocks before it in each family's own tags (``<think>``, ``<seed:think>``, ``<thought>``,
``[THINK]``, ...), gpt-oss's harmony channels, code fences and prose around the object, Python
literals. Everything here is a pure function of the answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
# gpt-oss's harmony format: <|channel|>NAME[ to=...][<|constrain|>FMT]<|message|>BODY<|end|>
_HARMONY_FINAL = re.compile(
    r"<\|channel\|>\s*final\b[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>"
    r"(.*?)(?=<\|end\|>|<\|return\|>|<\|call\|>|<\|start\|>|\Z)",
    re.DOTALL,
)

#: The reasoning blocks open-weight models write into ``content`` before their answer when the
#: server does not take them apart, as (opening, closing) tags: DeepSeek-R1, Qwen3, QwQ,
#: Hunyuan, GLM-4.5 and MiniMax-M2 (``<think>``); Seed-OSS (``<seed:think>``, and the budget
#: reflections it writes inside, ``<seed:cot_budget_reflect>``); EXAONE Deep (``<thought>``);
#: Magistral on llama.cpp (``[THINK]``); coding models (``<thinking>``, ``<reasoning>``).
REASONING_TAGS: tuple[tuple[str, str], ...] = (
    ("<think>", "</think>"),
    ("<seed:think>", "</seed:think>"),
    ("<seed:cot_budget_reflect>", "</seed:cot_budget_reflect>"),
    ("<thought>", "</thought>"),
    ("[THINK]", "[/THINK]"),
    ("<thinking>", "</thinking>"),
    ("<reasoning>", "</reasoning>"),
)
# The tags around the answer after the reasoning: Hunyuan's <answer> (vLLM's hunyuan_a13b
# parser), Reflection-70B's <output> (its system prompt: "provide your final response inside
# <output> tags").
_ANSWER_TAGS = (("<answer>", "</answer>"), ("<output>", "</output>"))

#: The ``finish_reason`` values of an answer the model ended itself: OpenAI's ``stop``, a tool
#: call (answered apart), and what other servers send for the same: ``eos_token`` and
#: ``stop_sequence`` (text-generation-inference before its PR #2344), ``eos`` (Together AI:
#: openai/openai-dotnet#267), ``end`` (earendil-works/pi#2107), ``end_turn`` (Anthropic's
#: stop reason). Any other value (``length``, ``insufficient_system_resource``, ``sensitive``,
#: ``model_context_window_exceeded``, one not known) means the answer may be incomplete.
COMPLETE_REASONS = frozenset(
    {
        "stop",
        "eos",
        "eos_token",
        "stop_sequence",
        "end",
        "end_turn",
        "tool_calls",
        "function_call",
    }
)


@dataclass(frozen=True)
class Answer:
    """What a model answered: its text (reasoning and channel markers removed) and why it
    stopped (``finish_reason`` as the server sent it, lower-cased and kept to one word;
    ``stop`` when it sent none)."""

    text: str
    finish_reason: str = "stop"

    @property
    def complete(self) -> bool:
        """Whether the model ended the answer itself (else it may be cut short)."""
        return self.finish_reason.lower() in COMPLETE_REASONS

    @property
    def cut_at_limit(self) -> bool:
        """Whether it stopped at its output token limit (``finish_reason: "length"``)."""
        return self.finish_reason.lower() == "length"


@dataclass(frozen=True)
class Reasoned:
    """An answer taken apart: what follows its reasoning (``answer``), whether it had any
    (``reasoned``), and the opening tag of a reasoning block never closed (``unclosed``: then
    all of it was reasoning and ``answer`` is empty)."""

    answer: str
    reasoned: bool = False
    unclosed: str | None = None


class BadJSON(ValueError):
    """An answer could not be parsed or validated; the message tells the model what to fix."""


def message_text(content: object) -> str:
    """The text of a message's ``content``: a string, or a list of parts whose ``text`` parts
    are joined (Mistral's Magistral answers ``[{"type": "thinking", ...}, {"type": "text",
    "text": ...}]``; thinking, reasoning and other parts are dropped)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") == "text":
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
    return "".join(texts)


def strip_harmony(text: str) -> str:
    """Only the ``final`` channel of an answer in gpt-oss's harmony format
    (``<|channel|>analysis<|message|>...<|end|><|start|>assistant<|channel|>final<|message|>
    ...``); an answer with channels but no final one was all reasoning (empty). Only an
    answer that starts with a channel is taken apart: a report about the format keeps its
    examples."""
    if not text.lstrip().startswith(("<|channel|>", "<|start|>")):
        return text
    finals = _HARMONY_FINAL.findall(text)
    return finals[-1].strip() if finals else ""


def split_reasoning(text: str) -> Reasoned:
    """``text`` without the reasoning before its answer: every leading block of
    :data:`REASONING_TAGS` (an empty one too: Qwen3 with thinking off writes
    ``<think>\\n\\n</think>``), and the reasoning before a closing tag whose opening the
    chat template wrote (DeepSeek-R1, Qwen3-Thinking-2507 and EXAONE Deep open it in the
    prompt, so only ``</think>`` or ``</thought>`` arrives; none is looked for after a block
    the model opened itself). The ``<answer>`` (Hunyuan) or ``<output>`` (Reflection-70B)
    around what follows the reasoning is unwrapped. A block never closed was all reasoning: no
    answer. A tag quoted in inline code (a report about these models) is not taken for
    reasoning."""
    rest = text.lstrip()
    reasoned = False
    while True:
        for opening, closing in REASONING_TAGS:
            if rest.startswith(opening):
                end = rest.find(closing, len(opening))
                if end < 0:
                    return Reasoned("", True, opening)
                rest = rest[end + len(closing) :].lstrip()
                reasoned = True
                break
        else:
            break
    after = None if reasoned else _after_opened_by_template(rest)
    if after is not None:
        rest, reasoned = after, True
    for opening, closing in _ANSWER_TAGS if reasoned else ():
        if rest.startswith(opening):
            rest = rest[len(opening) :]
            end = rest.rfind(closing)
            rest = rest[:end] if end >= 0 else rest
            break
    return Reasoned(rest.strip(), reasoned)


def strip_reasoning(text: str) -> str:
    """``text`` without its reasoning (:func:`split_reasoning`)."""
    return split_reasoning(text).answer


def _after_opened_by_template(text: str) -> str | None:
    """What follows the first closing reasoning tag whose opening tag does not come before it
    (the chat template opened the block), or None when there is none. A text that opens
    with a Markdown title is a report, whatever tags it goes on to name."""
    if text.startswith("# "):
        return None
    cuts: list[int] = []
    for opening, closing in REASONING_TAGS:
        at = _unquoted(text, closing)
        if at >= 0 and opening not in text[:at]:
            cuts.append(at + len(closing))
    return text[min(cuts) :].lstrip() if cuts else None


def _unquoted(text: str, tag: str) -> int:
    """Where ``tag`` first occurs outside inline code (not next to a backtick); -1: nowhere."""
    at = text.find(tag)
    while at >= 0:
        before = text[at - 1] if at else ""
        after = text[at + len(tag) : at + len(tag) + 1]
        if "`" not in (before, after):
            return at
        at = text.find(tag, at + 1)
    return -1


def extract_json_object(text: str) -> Any:
    """Parse ``text`` as JSON, tolerating code fences and prose around the first ``{...}``,
    and what models write that is almost JSON (Python quotes and literals, trailing commas,
    comments: repaired by ``json_repair``); a one-element list around the value and JSON
    encoded twice (a string holding the object) are unwrapped."""
    value = _decode(text)
    for _ in range(2):
        if isinstance(value, str) and value.strip()[:1] in ("{", "["):
            value = _decode(value)
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
    return value


def _decode(text: str) -> Any:
    text = text.strip()
    candidates = [text, *(m.group(1).strip() for m in _FENCE.finditer(text))]
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    block = _first_object(text)
    if block is not None:
        try:
            return json.loads(block)
        except ValueError:
            pass
    start = min((i for i in (text.find("{"), text.find("[")) if i >= 0), default=-1)
    if start < 0:
        raise BadJSON("it contained no JSON object")
    import json_repair

    repaired = json_repair.loads(text[start:])
    if repaired in ("", None, [], {}):
        raise BadJSON("it was not valid JSON")
    return repaired


def _first_object(text: str) -> str | None:
    """The first balanced ``{...}`` in ``text``, respecting braces inside strings."""
    start = text.find("{")
    if start < 0:
        return None
    depth, in_string, escaped = 0, False, False
    for i in range(start, len(text)):
        char = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start : i + 1]
    return None


def cut_off_words(answer: Answer) -> str:
    """Why an answer may be incomplete, as the JSON re-ask tells the model."""
    if answer.cut_at_limit:
        return "it was cut off at the output token limit"
    return f"it was cut off (finish_reason {answer.finish_reason})"


def parse_answer(answer: Answer, schema: type[T]) -> T:
    """``answer`` as ``schema``, or :class:`BadJSON` saying what to fix."""
    if not answer.complete:
        raise BadJSON(cut_off_words(answer))
    data = extract_json_object(answer.text)
    if not isinstance(data, dict):
        raise BadJSON(f"it was a JSON {type(data).__name__}, not an object")
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'object'}: {err['msg']}"
            for err in exc.errors()
        )
        raise BadJSON(f"it did not match the expected fields ({problems})") from None
