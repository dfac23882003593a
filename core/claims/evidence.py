"""What a source's evidence is, as the verifier is told (issue 52, item 5): passages read from a
web page, from a file attached in the chat, an internal document an MCP server returned, or
only the search engine's snippet of a page that was not read.

A snippet is a few lines cut out of a page by the search engine, often mid-sentence: a claim it
does not itself hold may well be on the page, or not. So a claim whose cited sources are
snippets only is "supported" only when a snippet plainly holds it (the lexical pass); the
verifier's "supported" on such a claim is taken as "partial" (:mod:`core.claims.check`).
"""

from __future__ import annotations

from enum import StrEnum


class EvidenceKind(StrEnum):
    PAGE = "page"
    FILE = "file"
    INTERNAL = "internal"
    SNIPPET = "snippet"

    @property
    def label(self) -> str:
        """What the verifier's evidence block says it is."""
        return _LABELS[self]


_LABELS = {
    EvidenceKind.PAGE: "page passages (read from the page)",
    EvidenceKind.FILE: "file passages (a file attached in the chat)",
    EvidenceKind.INTERNAL: "internal document (returned by the team's own source)",
    EvidenceKind.SNIPPET: "search snippet only (page not read)",
}
