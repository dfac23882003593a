"""What made an evaluation's numbers: the question set (by a hash of what was asked), the
models and where they were served, the search provider, the Fathom release and the date. Each
result carries it, the table's header shows it, and ``--compare`` reads it to refuse or warn."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from core.build import version
from core.evaluation.questions import EvalQuestion
from core.llm import public_endpoint

if TYPE_CHECKING:
    from core.llm import LLMClients

#: Hex digits of the question set's id (48 bits: two sets of one person never collide).
ID_LENGTH = 12


class Provenance(BaseModel):
    """Where one evaluation's results come from. Endpoints are shown as
    ``core.llm.errors.public_endpoint`` shows them: no user, password or query."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    #: The id of the question set: a hash of every question as it was asked
    #: (:func:`question_set_id`), and how many there were.
    question_set: str
    questions: int
    planner_model: str
    planner_endpoint: str
    writer_model: str
    writer_endpoint: str
    #: The judge of claims (when ``claim_check``) and of expected facts.
    verifier_model: str
    verifier_endpoint: str
    #: Whether each report's claims were checked (``FATHOM_VERIFY_CLAIMS``).
    claim_check: bool
    search: str
    fathom_version: str
    #: When the evaluation started (UTC, ISO 8601, to the second).
    date: str


def question_set_id(questions: Sequence[EvalQuestion]) -> str:
    """A hash of ``questions`` as they were asked: each one's id, text, language, depth,
    strategy, sources and expected facts (the defaults a question left to the settings
    filled in), in the file's order. The same file asked with another default depth is
    another question set."""
    asked = [{**asdict(q), "expected": list(q.expected)} for q in questions]
    canonical = json.dumps(asked, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:ID_LENGTH]


def provenance_of(
    questions: Sequence[EvalQuestion],
    llm: LLMClients,
    *,
    claim_check: bool,
    search: str,
    now: datetime,
) -> Provenance:
    """The provenance of an evaluation of ``questions`` with the models of ``llm`` (their
    endpoints without credentials or query), started at ``now`` (aware)."""
    return Provenance(
        question_set=question_set_id(questions),
        questions=len(questions),
        planner_model=llm.planner.model,
        planner_endpoint=public_endpoint(llm.planner.base_url),
        writer_model=llm.writer.model,
        writer_endpoint=public_endpoint(llm.writer.base_url),
        verifier_model=llm.verifier.model,
        verifier_endpoint=public_endpoint(llm.verifier.base_url),
        claim_check=claim_check,
        search=search,
        fathom_version=version(),
        date=now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    )


@dataclass(frozen=True)
class Difference:
    """One way two evaluations' provenance differs, and why it matters to their numbers."""

    what: str
    before: str
    now: str
    meaning: str

    def line(self) -> str:
        return f"{self.what} differs ({self.before} → {self.now}): {self.meaning}"


#: The fields compared, what each is called, and what a difference means for the numbers.
_MEANINGS = (
    (
        "verifier_model",
        "the verifier model",
        "claims supported and expected facts were judged by another model",
    ),
    (
        "verifier_endpoint",
        "the verifier's endpoint",
        "claims supported and expected facts were judged by another server",
    ),
    (
        "claim_check",
        "the claim check",
        "one side's claims were not checked, so its claim measures are empty",
    ),
    ("writer_model", "the writer model", "the reports were written by another model"),
    ("writer_endpoint", "the writer's endpoint", "the reports were written by another server"),
    ("planner_model", "the planner model", "the searches were planned by another model"),
    ("planner_endpoint", "the planner's endpoint", "the searches were planned by another server"),
    ("search", "the search provider", "the sources found come from another provider"),
    (
        "fathom_version",
        "the Fathom release",
        "the research and the claim check themselves may have changed",
    ),
)


def differences(before: Provenance, now: Provenance) -> list[Difference]:
    """Each way ``before`` and ``now`` differ that matters to read their numbers side by side
    (the date aside; the question set is compared on its own)."""
    found = []
    for field, what, meaning in _MEANINGS:
        old, new = getattr(before, field), getattr(now, field)
        if old != new:
            shown = [_shown(v) for v in (old, new)]
            found.append(Difference(what, shown[0], shown[1], meaning))
    return found


def _shown(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)
