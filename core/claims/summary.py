"""What a report's claim check came to, as a run keeps it: stored with the run (its
``claim_check`` column), shown by ``fathom research --json`` (``claims``) and counted in the
final progress line, so that every replica shows the same."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field


class ClaimSummary(BaseModel):
    """One claim: its text as written, the sources it cited, the verdict (``supported``,
    ``partial``, ``unsupported``; None: nothing checked it), the source it was re-cited to,
    and what was done to it (``recited``, ``revised``, ``dropped``, ``unverified``; None:
    left as written)."""

    model_config = ConfigDict(extra="ignore")

    text: str
    cited: list[int] = Field(default_factory=list)
    verdict: str | None = None
    source: int | None = None
    fixed: str | None = None


class CheckSummary(BaseModel):
    """Every cited claim of a report and its check; ``partial``: the verifier model could not
    be used, so the claims the lexical pass did not settle are unchecked; ``uncited``: the
    writer's sentences that cite nothing and state a number (``core.claims.uncited``; None:
    not counted, as by a release before it). The claims cite by the numbers of the report's
    sources list once :meth:`renumbered` (as the run stores them)."""

    model_config = ConfigDict(extra="ignore")

    claims: list[ClaimSummary] = Field(default_factory=list)
    partial: bool = False
    uncited: int | None = None

    def renumbered(self, numbers: Mapping[int, int]) -> CheckSummary:
        """The claims citing by the report's numbers (``numbers``: the writer's number of a
        source -> the report's); a source the report does not list (its only citation was
        removed by the check) is left out of ``cited``, and ``source`` is then None."""
        return self.model_copy(
            update={
                "claims": [
                    claim.model_copy(
                        update={
                            "cited": [numbers[n] for n in claim.cited if n in numbers],
                            "source": numbers.get(claim.source)
                            if claim.source is not None
                            else None,
                        }
                    )
                    for claim in self.claims
                ]
            }
        )

    @property
    def supported(self) -> int:
        """Claims supported by their sources as written."""
        return sum(1 for c in self.claims if c.verdict == "supported" and c.fixed is None)

    @property
    def fixed(self) -> int:
        return sum(1 for c in self.claims if c.fixed is not None)
