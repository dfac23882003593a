"""core.claims.quotes: the quotes shown beside each source come only from supported claims."""

from core.claims.quotes import source_quotes
from core.claims.summary import QUOTE_CHARS, CheckSummary, ClaimSummary


def _claim(**fields: object) -> ClaimSummary:
    return ClaimSummary.model_validate({"text": "x", "cited": [1], **fields})


def test_quotes_come_from_supported_claims_only() -> None:
    check = CheckSummary(
        claims=[
            _claim(verdict="supported", quote="Heat pumps work at -25 C.", quote_source=1),
            _claim(verdict="unsupported", fixed="unverified", quote="no", quote_source=1),
            _claim(verdict="partial", quote="half", quote_source=2),
            _claim(verdict="supported", fixed="dropped", quote="gone", quote_source=2),
            _claim(verdict=None, quote="unchecked", quote_source=3),
        ]
    )
    assert source_quotes(check) == {1: ["Heat pumps work at -25 C."]}


def test_at_most_two_distinct_short_quotes_per_source() -> None:
    long = "word " * 100
    check = CheckSummary(
        claims=[
            _claim(verdict="supported", quote="first", quote_source=4),
            _claim(verdict="supported", quote="first", quote_source=4),
            _claim(verdict="supported", quote=long, quote_source=4),
            _claim(verdict="supported", quote="third", quote_source=4),
        ]
    )
    quotes = source_quotes(check)[4]
    assert quotes[0] == "first" and len(quotes) == 2
    assert len(quotes[1]) <= QUOTE_CHARS


def test_no_check_no_quotes() -> None:
    assert source_quotes(None) == {}
    assert source_quotes(CheckSummary(claims=[_claim(verdict="supported")])) == {}
