"""What a request to a model costs in tokens, estimated before it is sent
(:func:`prompt_tokens`), and what the rest of a run may still spend (:class:`TokenRoom`):
the engine's budgets, the writer and the claim check fit their requests with them."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.models import Usage

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def prompt_tokens(messages: Iterable[Mapping[str, str]]) -> int:
    """What a request's messages cost at most, estimated before it is sent: a CJK character
    a token, three other characters a token (tokenizers give English prose about four, URLs
    and numbers about three), and a few tokens per message."""
    total = 0
    for message in messages:
        text = message.get("content", "")
        cjk = len(_CJK.findall(text))
        total += cjk + math.ceil((len(text) - cjk) / 3) + 4
    return total


def text_tokens(text: str) -> int:
    """:func:`prompt_tokens` of one piece of text (no message overhead)."""
    return prompt_tokens([{"content": text}]) - 4


@dataclass(frozen=True)
class TokenRoom:
    """What the rest of a run may spend: ``limit`` tokens in all for the run (its budget or,
    when lower, its daily allowance), of which ``usage`` counts what is spent. ``quota``: the
    daily allowance is what binds (the notes name FATHOM_USER_DAILY_TOKENS, not the budget)."""

    limit: int
    usage: Usage
    quota: bool = False

    def left(self) -> int:
        return max(0, self.limit - (self.usage.prompt_tokens + self.usage.completion_tokens))

    def fits(self, messages: Iterable[Mapping[str, str]], answer: int) -> bool:
        """Whether a request of ``messages`` and an answer of about ``answer`` tokens fit."""
        return prompt_tokens(messages) + answer <= self.left()
