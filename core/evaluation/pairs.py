"""A labelled set of claim/evidence pairs for ``fathom eval --judge-check``: one JSON object
per line.

``{"id", "language": "en"|"zh", "claim", "title", "url", "evidence": [passages], "label":
"supported"|"partial"|"unsupported"|"contradicted", "flip"?}``; ``flip`` names the meaning
flip a pair plants (``negation``, ``scale``, ``month``, ``roles``, ``comparative``, ``order``,
...), if any. Blank lines are skipped; a line that is not such a pair, or a repeated id, is an
error naming its line. :data:`SHIPPED` is the set Fathom ships (package data, so an installed
wheel finds it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from enum import StrEnum
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from core.claims.verifier import PASSAGES_PER_CLAIM

#: The shipped set's file name, beside this module.
SHIPPED = "judge_pairs.jsonl"


class Label(StrEnum):
    """What the evidence does for the claim, as a careful reader labelled it."""

    SUPPORTED = "supported"  # says what the claim says
    PARTIAL = "partial"  # says part of it, or less firmly
    UNSUPPORTED = "unsupported"  # does not say it (nor its opposite)
    CONTRADICTED = "contradicted"  # says the opposite, or another number, date or order


class PairsError(ValueError):
    """The pairs cannot be used; the message names the line and what is wrong."""


class JudgePair(BaseModel):
    """One claim, the evidence its cited source gave (at most the passages the verifier is
    shown per claim), and the label."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, frozen=True)

    id: str = Field(min_length=1, max_length=100)
    language: Literal["en", "zh"]
    claim: str = Field(min_length=1, max_length=2000)
    title: str = Field(min_length=1, max_length=300)
    url: str = Field(min_length=1, max_length=2000)
    evidence: list[str] = Field(min_length=1, max_length=PASSAGES_PER_CLAIM)
    label: Label
    flip: str | None = None


def parse_pairs(lines: Iterable[str]) -> list[JudgePair]:
    """The pairs of a JSONL file (raises :class:`PairsError`)."""
    pairs: list[JudgePair] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            pair = JudgePair.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise PairsError(f"line {number}: not JSON ({exc.msg})") from None
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'the line'}: {e['msg']}"
                for e in exc.errors()
            )
            raise PairsError(f"line {number}: {problems}") from None
        if not all(p.strip() for p in pair.evidence):
            raise PairsError(f"line {number}: evidence: a passage is empty")
        if pair.id in seen:
            raise PairsError(f"line {number}: the id {pair.id!r} is used twice")
        seen.add(pair.id)
        pairs.append(pair)
    if not pairs:
        raise PairsError("there is no pair in it")
    return pairs


def shipped_lines() -> list[str]:
    """The lines of the shipped set (read from the installed package)."""
    return (resources.files("core.evaluation") / SHIPPED).read_text(encoding="utf-8").splitlines()


def pairs_id(pairs: Iterable[JudgePair]) -> str:
    """A hash of ``pairs`` (which set was judged, as an evaluation's question set id)."""
    canonical = json.dumps(
        [p.model_dump(mode="json") for p in pairs], ensure_ascii=False, sort_keys=True
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]
