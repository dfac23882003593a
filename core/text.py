"""Hygiene for text that arrives from outside (chat messages, command text): what may be
stored and searched.

NUL and other control characters are removed (PostgreSQL refuses NUL in text, and none of
them means anything in a topic), and so are lone surrogates (JSON's ``"\ud800"`` decodes to
one, and it cannot be encoded to be stored); invisible formatting characters (zero-width
spaces, bidi overrides, byte-order marks) and U+FFFD replacement characters are removed too,
except the zero-width (non-)joiners that some scripts and emoji need. :func:`has_visible`
tells whether anything a person could read is left.
"""

from __future__ import annotations

import unicodedata

#: Zero-width non-joiner and joiner: part of how Persian, Indic scripts and emoji are written.
_KEPT_FORMAT = frozenset("\u200c\u200d")
_WHITESPACE_CONTROLS = frozenset("\t\n\r\x0b\x0c")


def clean_text(text: str) -> str:
    """``text`` without control, invisible formatting, lone surrogate and replacement
    characters (whitespace controls become spaces)."""
    # Each distinct character is judged once, then all are replaced in one pass: a page's text
    # has a few hundred distinct characters and tens of thousands of characters.
    table: dict[int, str | None] = {}
    for char in set(text):
        if char in _WHITESPACE_CONTROLS:
            table[ord(char)] = " "
        elif _removed(char):
            table[ord(char)] = None
    return text.translate(table)


def _removed(char: str) -> bool:
    category = unicodedata.category(char)
    # A lone surrogate (JSON's "\ud800") cannot even be encoded to be stored: removed too.
    if category in ("Cc", "Cs") or char == "\ufffd":
        return True
    return category == "Cf" and char not in _KEPT_FORMAT


def has_visible(text: str) -> bool:
    """True when ``text`` has at least one character a person could see."""
    return any(
        not char.isspace()
        and unicodedata.category(char) not in ("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp")
        and char != "\ufffd"
        for char in text
    )
