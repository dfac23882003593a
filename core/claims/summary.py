"""What a report's claim check came to, as a run keeps it: stored with the run (its
``claim_check`` column), shown by ``fathom research --json`` (``claims`` and ``claim_check``)
and counted in the final progress line, so that every replica shows the same."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

from core.words import note_words
from core.words.wording import Language

#: The longest quote a claim keeps of the passage that supported it.
QUOTE_CHARS = 200


class ClaimSummary(BaseModel):
    """One claim: its text as written, the sources it cited, the verdict (``supported``,
    ``partial``, ``unsupported``, ``contradicted``; None: not checked), the source it was
    re-cited to, and what was done to it (``recited``, ``revised``, ``dropped``,
    ``unverified``; None: left as written). A claim found supported keeps the passage that
    supported it: ``quote`` (at most :data:`QUOTE_CHARS` characters of the source's own
    text, as data: never markup) from source ``quote_source`` (None: no quote kept)."""

    model_config = ConfigDict(extra="ignore")

    text: str
    cited: list[int] = Field(default_factory=list)
    verdict: str | None = None
    source: int | None = None
    fixed: str | None = None
    quote: str | None = None
    quote_source: int | None = None


class CheckSummary(BaseModel):
    """Every cited claim of a report and its check; ``partial``: some claims were not checked
    (``reasons``: why, ``core.claims.verifier.Unchecked``'s values; empty in what releases
    before issue 52 stored, whose ``partial`` meant the verifier model could not be used);
    ``uncited``: the writer's sentences that cite nothing and state a number
    (``core.claims.uncited``; None: not counted, as by a release before it). The claims cite by
    the numbers of the report's sources list once :meth:`renumbered` (as the run stores
    them)."""

    model_config = ConfigDict(extra="ignore")

    claims: list[ClaimSummary] = Field(default_factory=list)
    partial: bool = False
    uncited: int | None = None
    reasons: list[str] = Field(default_factory=list)

    def renumbered(self, numbers: Mapping[int, int]) -> CheckSummary:
        """The claims citing by the report's numbers (``numbers``: the writer's number of a
        source -> the report's); a source the report does not list (its only citation was
        removed by the check) is left out of ``cited``, and ``source`` is then None; a quote
        from such a source is dropped (``quote`` and ``quote_source`` None)."""
        return self.model_copy(update={"claims": [_renumbered(c, numbers) for c in self.claims]})

    @property
    def supported(self) -> int:
        """Claims supported by their sources as written."""
        return sum(1 for c in self.claims if c.verdict == "supported" and c.fixed is None)

    @property
    def fixed(self) -> int:
        return sum(1 for c in self.claims if c.fixed is not None)

    @property
    def unchecked(self) -> int:
        """Claims nothing checked (no verdict)."""
        return sum(1 for c in self.claims if c.verdict is None)

    def as_json(self) -> dict[str, object]:
        """``--json``'s ``claim_check``: whether the check was partial, how many claims it did
        not check and why."""
        return {"partial": self.partial, "unchecked": self.unchecked, "reasons": self.reasons}

    def note(self, language: Language) -> str:
        """The note (and final progress line) that says how the claims held."""
        return note_words.claims_checked_words(
            language,
            supported=self.supported,
            claims=len(self.claims),
            fixed=self.fixed,
            unchecked=self.unchecked if self.partial else 0,
            reasons=self.reasons,
        )


def _renumbered(claim: ClaimSummary, numbers: Mapping[int, int]) -> ClaimSummary:
    quoted = numbers.get(claim.quote_source) if claim.quote_source is not None else None
    return claim.model_copy(
        update={
            "cited": [numbers[n] for n in claim.cited if n in numbers],
            "source": numbers.get(claim.source) if claim.source is not None else None,
            "quote": claim.quote if quoted is not None else None,
            "quote_source": quoted,
        }
    )
