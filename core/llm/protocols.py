"""What the engine, the claim check and the research side need of a model: a JSON answer
in a schema (:class:`JsonModel`) and a text answer (:class:`TextModel`). The client
(:class:`core.llm.client.ChatModel`) is one; tests pass fakes of the endpoint instead."""

from __future__ import annotations

from typing import Protocol, TypeVar

from pydantic import BaseModel

from core.llm.answers import Answer
from core.models import Usage

T = TypeVar("T", bound=BaseModel)


class JsonModel(Protocol):
    async def complete_json(
        self,
        messages: list[dict[str, str]],
        schema: type[T],
        *,
        usage: Usage,
        schema_name: str = "answer",
    ) -> T: ...


class TextModel(JsonModel, Protocol):
    async def complete(
        self, messages: list[dict[str, str]], *, usage: Usage, max_tokens: int | None = None
    ) -> Answer: ...
