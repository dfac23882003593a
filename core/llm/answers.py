"""What a model answered, taken apart: its text without reasoning, and JSON from almost-JSON.

Endpoints differ in how they wrap an answer: a list of content parts (Mistral), a
``<think>`` preamble (reasoning models), gpt-oss's harmony channels, code fences and prose
around the object, Python literals. Everything here is a pure function of the answer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

T = TypeVar("T", bound=BaseModel)
_THINK = re.compile(r"^\s*(?:<think>.*?</think>\s*)+", re.DOTALL)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
# gpt-oss's harmony format: <|channel|>NAME[ to=...][<|constrain|>FMT]<|message|>BODY<|end|>
_HARMONY_FINAL = re.compile(
    r"<\|channel\|>\s*final\b[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>"
    r"(.*?)(?=<\|end\|>|<\|return\|>|<\|call\|>|<\|start\|>|\Z)",
    re.DOTALL,
)
# What a server sends to name a response_format it does not take (only such a 400 turns the


@dataclass(frozen=True)
class Answer:
    """What a model answered: its text (thinking and channel markers removed) and whether it
    stopped at its output limit (``finish_reason: "length"``), so may be cut short."""

    text: str
    truncated: bool = False


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


def strip_think(text: str) -> str:
    """Drop the ``<think>...</think>`` preamble reasoning models put before the answer."""
    text = _THINK.sub("", text)
    head, sep, tail = text.partition("</think>")
    if sep and "<think>" not in head:  # opening tag was part of the chat template
        text = tail
    if text.lstrip().startswith("<think>"):  # never closed: all of it was thinking
        return ""
    return text.strip()


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


def parse_answer(answer: Answer, schema: type[T]) -> T:
    """``answer`` as ``schema``, or :class:`BadJSON` saying what to fix."""
    if answer.truncated:
        raise BadJSON("it was cut off at the output token limit")
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
