"""Teams' citations on a report part: each ``[n]`` a part cites shows its source's title,
address and the quote that supported the claims citing it, in Teams' own citation pop-up.

The shape is Microsoft's ("Enhance AI-generated bot messages", msteams-docs
``msteams-platform/bots/how-to/bot-messages-ai-generated-content.md``, and "Add citations and
sensitivity labels to agent messages", 2026-07): an activity carries one root message entity
(``type`` ``https://schema.org/Message``, ``@type`` ``Message``, ``@context``
``https://schema.org``, ``@id`` empty) whose ``additionalType`` ``AIGeneratedContent`` is the
AI label and whose ``citation`` lists ``Claim``\\ s: ``position`` (an integer, unique in the
message, matching the ``[n]`` of the text) and ``appearance`` (a ``DigitalDocument``: ``name``,
at most 80 characters; ``url``; ``abstract``, at most 160). Teams answers 400 to a message
with more than 20 citations, to a second root entity and to an empty appearance. The docs'
table leaves ``abstract`` optional, Microsoft's SDKs require it (Teams SDK's
``CitationAppearance``, the Agents SDK's ``ClientCitation``): every citation here has one.

- A part carries the citations of the sources it cites (in the order it first cites them, at
  most :data:`MAX_CITATIONS`, their JSON within :data:`CITATIONS_BUDGET` bytes); their
  markers stay ``[n]`` as Teams matches them. A source over either limit keeps the link of
  every other platform (``bots.chat.markdown.link_citations``).
- The abstract is the source's first quote (``core.claims.quotes.source_quotes``: only from a
  claim the check found supported) in quotation marks, or a neutral line saying none is
  shown (in the run's language). Titles and quotes are the sources' words: plain text,
  mentions inert, no link and no web address (``core.untrusted.as_data``), cut to Teams'
  limits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from bots.chat.markdown import CODE, utf8_size
from core.models import Source
from core.untrusted import as_data
from core.words.wording import Language, pick

#: Teams refuses a message with more citations (400, "Bot message with more than 20 citations").
MAX_CITATIONS = 20
#: The longest ``appearance.name`` and ``appearance.abstract`` Teams takes, in characters.
NAME_CHARS = 80
ABSTRACT_CHARS = 160
#: Bytes of JSON one part's citations may take (the text keeps the rest of the part's budget).
CITATIONS_BUDGET = 10_000
#: A citation marker as Teams matches it (``\[(\d+)\]``), not one already a link's text.
_MARKER = re.compile(r"(?<![\[\\])\[(\d+)\](?![(\]])")


def cited(markdown: str) -> list[int]:
    """The source numbers ``markdown`` cites outside code, each once, in order."""
    numbers: list[int] = []
    last = 0
    prose: list[str] = []
    for span in CODE.finditer(markdown):
        prose.append(markdown[last : span.start()])
        last = span.end()
    prose.append(markdown[last:])
    for text in prose:
        for match in _MARKER.finditer(text):
            number = int(match.group(1))
            if number not in numbers:
                numbers.append(number)
    return numbers


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def abstract(quotes: Sequence[str], language: Language) -> str:
    """The first quote in quotation marks, or a line saying the source shows none."""
    for quote in quotes:
        shown = as_data(quote)
        if shown:
            return "“" + _clip(shown, ABSTRACT_CHARS - 2) + "”"
    return pick(
        language,
        "No supporting quote is shown for this source.",
        "此来源没有可显示的支持引文。",
    )


def citation(source: Source, quotes: Sequence[str], language: Language) -> dict[str, Any]:
    """One ``Claim``: the source at its report number, titled, linked, with its abstract."""
    name = _clip(as_data(source.title), NAME_CHARS) or pick(
        language, f"Source {source.n}", f"来源 {source.n}"
    )
    appearance: dict[str, Any] = {"@type": "DigitalDocument", "name": name}
    if source.url.startswith(("https://", "http://")):
        appearance["url"] = source.url
    appearance["abstract"] = abstract(quotes, language)
    return {"@type": "Claim", "position": source.n, "appearance": appearance}


def message_entity(citations: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The message's root entity: the AI label, and its citations when it has any."""
    entity: dict[str, Any] = {
        "type": "https://schema.org/Message",
        "@type": "Message",
        "@context": "https://schema.org",
        "@id": "",
        "additionalType": ["AIGeneratedContent"],
    }
    if citations:
        entity["citation"] = list(citations)
    return entity


def citations_of(
    markdown: str,
    sources: Mapping[int, Source],
    quotes: Mapping[int, Sequence[str]],
    language: Language,
) -> list[dict[str, Any]]:
    """The citations a part whose text is ``markdown`` carries (see the module)."""
    carried: list[dict[str, Any]] = []
    size = 0
    for number in cited(markdown):
        source = sources.get(number)
        if source is None:
            continue
        made = citation(source, quotes.get(number, ()), language)
        grown = size + utf8_size(json.dumps(made, ensure_ascii=False)) + 2
        if len(carried) == MAX_CITATIONS or grown > CITATIONS_BUDGET:
            break
        carried.append(made)
        size = grown
    return carried
