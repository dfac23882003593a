"""The evidence shown beside each source of a report (issue 56): for each source, up to two
short quotes of its own text that supported the claims citing it.

A quote comes only from a claim the check found supported (``ClaimSummary.quote``, kept by
:mod:`core.claims.check`); a claim marked as not verified, or dropped, shows none. Quotes are
the sources' text: untrusted data, never markup (each platform renders them inert).
"""

from __future__ import annotations

from core.claims.summary import QUOTE_CHARS, CheckSummary

#: Quotes shown per source at most.
QUOTES_PER_SOURCE = 2
#: What was done to a claim that leaves it without evidence to show.
_NO_EVIDENCE = frozenset({"unverified", "dropped"})


def source_quotes(
    check: CheckSummary | None, per_source: int = QUOTES_PER_SOURCE
) -> dict[int, list[str]]:
    """Source number (as the report lists it) -> its quotes, in the order the claims cite it,
    each once and at most :data:`~core.claims.summary.QUOTE_CHARS` characters."""
    quotes: dict[int, list[str]] = {}
    if check is None:
        return quotes
    for claim in check.claims:
        if claim.quote is None or claim.quote_source is None or claim.fixed in _NO_EVIDENCE:
            continue
        if claim.verdict != "supported":
            continue
        text = " ".join(claim.quote.split())[:QUOTE_CHARS]
        kept = quotes.setdefault(claim.quote_source, [])
        if text and text not in kept and len(kept) < per_source:
            kept.append(text)
    return {n: q for n, q in quotes.items() if q}
