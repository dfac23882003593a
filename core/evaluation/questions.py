"""A question set for ``fathom eval``: one JSON object per line.

``{"id", "question", "language"?, "depth"?, "strategy"?, "sources"?, "expected"?: [facts]}``;
blank lines are skipped. A line that is not such an object, a repeated id, or a value a
research would refuse (an empty question, a depth over ``FATHOM_MAX_DEPTH``, an unknown
strategy) is an error naming its line, before anything is run.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.chat.commands import (
    CommandError,
    validate_depth,
    validate_sources,
    validate_strategy,
    validate_topic,
)
from core.values import SourceChoice
from core.words.wording import Language, request_language

#: At most this many expected facts per question (each is asked of the verifier model).
MAX_EXPECTED = 20


class QuestionsError(ValueError):
    """The question set cannot be used; the message names the line and what is wrong."""


class _QuestionLine(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    id: str = Field(min_length=1, max_length=100)
    question: str
    language: Literal["en", "zh"] | None = None
    depth: int | None = None
    strategy: str | None = None
    sources: str | None = None
    expected: list[str] = Field(default_factory=list, max_length=MAX_EXPECTED)


@dataclass(frozen=True)
class EvalQuestion:
    """One question, validated as a research request would be."""

    id: str
    question: str
    language: Language
    depth: int
    strategy: str
    sources: SourceChoice
    expected: tuple[str, ...] = ()


def parse_questions(
    lines: Iterable[str], *, default_depth: int, max_depth: int, default_strategy: str
) -> list[EvalQuestion]:
    """The questions of a JSONL question set (raises :class:`QuestionsError`)."""
    questions: list[EvalQuestion] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = _QuestionLine.model_validate(json.loads(line))
            question = EvalQuestion(
                id=raw.id,
                question=validate_topic(raw.question),
                language=raw.language or request_language(raw.question),
                depth=validate_depth(raw.depth, default=default_depth, maximum=max_depth),
                strategy=validate_strategy(raw.strategy, default_strategy),
                sources=validate_sources(raw.sources),
                expected=tuple(f for f in (" ".join(e.split()) for e in raw.expected) if f),
            )
        except json.JSONDecodeError as exc:
            raise QuestionsError(f"line {number}: not JSON ({exc.msg})") from None
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'the line'}: {e['msg']}"
                for e in exc.errors()
            )
            raise QuestionsError(f"line {number}: {problems}") from None
        except CommandError as exc:
            raise QuestionsError(f"line {number}: {exc}") from None
        if question.id in seen:
            raise QuestionsError(f"line {number}: the id {question.id!r} is used twice")
        seen.add(question.id)
        questions.append(question)
    if not questions:
        raise QuestionsError("there is no question in it")
    return questions
