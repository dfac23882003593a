"""How a platform judges a failed call (a post, an edit, a file's download), and the rule that
a judge which fails itself means "try again"."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("core.operations.job")  # (where these lines were always logged)


@dataclass(frozen=True)
class PostFailure:
    """How a platform judges a failed post: ``reason`` is short and safe to log and show."""

    reason: str
    retryable: bool
    retry_after: float = 0.0  # the platform asked to wait at least this long (rate limits)


class Judge(Protocol):
    def classify(self, error: Exception) -> PostFailure: ...


def judge(judged_by: Judge, error: Exception) -> PostFailure:
    """The platform's judgement of a failed call; a judge that fails itself (an answer in a
    shape nobody foresaw) means "try again", never "give up"."""
    try:
        return judged_by.classify(error)
    except Exception:
        log.warning("judging %s failed; retried", type(error).__name__, exc_info=True)
        return PostFailure(type(error).__name__, True)
