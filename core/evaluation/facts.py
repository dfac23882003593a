"""Whether a report states the facts a question set expects of it: the verifier model is
asked, fact by fact, yes or no, in one request per report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from core.claims.verifier import valid_entries
from core.llm.protocols import JsonModel
from core.models import Usage
from core.research.prompts import facts_messages

#: The most of a report the request shows (a long report's end is its sources).
REPORT_CHARS = 40_000


class FactAnswer(BaseModel):
    """The model's word on one fact (``covered``: yes or no, or true or false)."""

    model_config = ConfigDict(extra="ignore")

    fact: int
    covered: bool

    @field_validator("covered", mode="before")
    @classmethod
    def _yes_or_no(cls, value: Any) -> Any:
        if isinstance(value, str):
            word = value.strip().lower()
            return {"yes": True, "no": False}.get(word, word)
        return value


class FactAnswers(BaseModel):
    model_config = ConfigDict(extra="ignore")

    facts: list[FactAnswer] = Field(default_factory=list)

    @field_validator("facts", mode="before")
    @classmethod
    def _valid_only(cls, value: Any) -> Any:
        return valid_entries(FactAnswer, value)


async def facts_covered(
    model: JsonModel, report: str, facts: Sequence[str], usage: Usage
) -> list[bool | None]:
    """For each of ``facts``, whether ``report`` states it (None: the model did not say).
    Raises the model's ``LLMError`` when the request fails."""
    if not facts:
        return []
    messages = facts_messages(report[:REPORT_CHARS], facts)
    answer = await model.complete_json(messages, FactAnswers, usage=usage, schema_name="facts")
    said = {a.fact: a.covered for a in answer.facts}
    return [said.get(i) for i in range(1, len(facts) + 1)]
