"""The evidence shown beside each source of a report (issue 56): for each source, up to two
short quotes of its own text that supported the claims citing it.

A quote comes only from a claim the check found supported (``ClaimSummary.quote``, kept by
:mod:`core.claims.check`): supported as written, or re-cited to the source that says it, or
revised to what its source says (those keep the verdict that failed them, and ``fixed``
says what was done); a claim marked as not verified, dropped, partial, contradicted or not
checked shows none. Quotes are the sources' text: untrusted data, never markup (each platform
renders them inert).
"""

from __future__ import annotations

from core.claims.summary import QUOTE_CHARS, CheckSummary, ClaimSummary

#: Quotes shown per source at most.
QUOTES_PER_SOURCE = 2
#: What was done to a failing claim that gave it evidence: the source that says it, or a
#: sentence its source says.
_EVIDENCED = frozenset({"recited", "revised"})


def source_quotes(
    check: CheckSummary | None, per_source: int = QUOTES_PER_SOURCE
) -> dict[int, list[str]]:
    """Source number (as the report lists it) -> its quotes, in the order the claims cite it,
    each once and at most :data:`~core.claims.summary.QUOTE_CHARS` characters."""
    quotes: dict[int, list[str]] = {}
    if check is None:
        return quotes
    for claim in check.claims:
        if claim.quote is None or claim.quote_source is None or not _evidenced(claim):
            continue
        text = " ".join(claim.quote.split())[:QUOTE_CHARS]
        kept = quotes.setdefault(claim.quote_source, [])
        if text and text not in kept and len(kept) < per_source:
            kept.append(text)
    return {n: q for n, q in quotes.items() if q}


def _evidenced(claim: ClaimSummary) -> bool:
    """Whether ``claim`` was found supported: as written, or once re-cited or revised."""
    if claim.fixed is None:
        return claim.verdict == "supported"
    return claim.fixed in _EVIDENCED
