"""What a report's claim check came to, as a run keeps it: stored with the run (its
``claim_check`` column), shown by ``fathom research --json`` (``claims``) and counted in the
final progress line, so that every replica shows the same."""

from __future__ import annotations

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
    be used, so the claims the lexical pass did not settle are unchecked."""

    model_config = ConfigDict(extra="ignore")

    claims: list[ClaimSummary] = Field(default_factory=list)
    partial: bool = False

    @property
    def supported(self) -> int:
        """Claims supported by their sources as written."""
        return sum(1 for c in self.claims if c.verdict == "supported" and c.fixed is None)

    @property
    def fixed(self) -> int:
        return sum(1 for c in self.claims if c.fixed is not None)
