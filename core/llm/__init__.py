"""Models behind any OpenAI-compatible endpoint: the client (``client``), what an answer is
and how JSON is taken out of it (``answers``), and what a failure is (``errors``)."""

from __future__ import annotations

from core.llm.answers import (
    Answer,
    extract_json_object,
    message_text,
    split_reasoning,
    strip_harmony,
    strip_reasoning,
)
from core.llm.client import ChatModel, JsonMode, LLMClients
from core.llm.errors import FailureKind, LLMError, LLMInvalidJSON, public_endpoint

__all__ = [
    "Answer",
    "ChatModel",
    "FailureKind",
    "JsonMode",
    "LLMClients",
    "LLMError",
    "LLMInvalidJSON",
    "extract_json_object",
    "message_text",
    "public_endpoint",
    "split_reasoning",
    "strip_harmony",
    "strip_reasoning",
]
