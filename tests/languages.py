"""Finding English in what a Chinese run shows (its notes, its progress)."""

from __future__ import annotations

import re

#: Three or more Latin words in a row: an English sentence or a piece of one ("was not
#: read", "the search failed"); single terms (HTTP, JSON, robots.txt, a host) are not.
_ENGLISH = re.compile(r"[A-Za-z][A-Za-z'’-]*(?:[,;:)]*\s+\(?[A-Za-z][A-Za-z'’-]*){2,}")


def english_sentences(text: str, *data: str) -> list[str]:
    """The English word runs of ``text`` once the data inserted in it (topics, file names,
    hosts, an outside server's words) and `commands` are taken out."""
    for item in sorted(data, key=len, reverse=True):
        text = text.replace(item, " · ")
    text = re.sub(r"`[^`]*`", " · ", text)
    return _ENGLISH.findall(text)
