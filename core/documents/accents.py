"""Accents that a PDF's text gives apart from their letters, joined to them again.

TeX's OT1 fonts (and Type 1 fonts used the same way) have no accented letters: ``\\"a`` is set
as a spacing diaeresis drawn over an "a", so PDFium and pdftotext return ``Universit¨at``
(the accent before its letter, as TeX set it), or ``Universita¨t`` and ``e´te´`` (after it, as
some producers order them), and ``Gu´ıa`` with a dotless i. Such words match no query and read
badly; :func:`joined_accents` makes them ``Universität``, ``été`` and ``Guía``.

Which letter an accent belongs to: the one it composes with (Unicode has a precomposed
letter for it); when both neighbours would, the one that makes a letter of European languages
(``a¨t``: ä, not ẗ), else the side the page's other accents take (a page is set by one
producer); an accent with no letter it composes with is left as it is, and so is an acute
accent typed for an English apostrophe (``don´t``). The
grave accent is also the ASCII backquote of code (```ls```), so it is joined only inside a word
(``syst`eme``) or to the one-letter words ``à`` and ``è``.
"""

from __future__ import annotations

import re
import unicodedata

#: Spacing accents as PDFium and pdftotext return TeX's, and the combining marks they stand
#: for.
_MARKS = {
    "\u00a8": "\u0308",  # ¨ diaeresis
    "\u00b4": "\u0301",  # ´ acute
    "`": "\u0300",  # grave
    "\u02c6": "\u0302",  # ˆ circumflex
    "\u02dc": "\u0303",  # ˜ tilde
    "\u00b8": "\u0327",  # ¸ cedilla
    "\u02c7": "\u030c",  # ˇ caron
    "\u02d8": "\u0306",  # ˘ breve
    "\u02d9": "\u0307",  # ˙ dot above
    "\u02da": "\u030a",  # ˚ ring
    "\u02dd": "\u030b",  # ˝ double acute
    "\u02db": "\u0328",  # ˛ ogonek
    "\u00af": "\u0304",  # ¯ macron
}
#: TeX sets í and ȷ̌ on the dotless letters.
_DOTLESS = {"\u0131": "i", "\u0237": "j"}
#: An accent next to a letter (the fast test: a page without one is returned as it is).
_ACCENTS = re.escape("".join(_MARKS))
_NEXT_TO_LETTER = re.compile(rf"[^\W\d_][{_ACCENTS}]|[{_ACCENTS}][^\W\d_]")
_ACCENT = re.compile(f"[{_ACCENTS}]")


def joined_accents(text: str) -> str:
    """``text`` with each spacing accent that stands apart from its letter joined to it
    (``Universit¨at`` -> ``Universität``)."""
    # (``in`` first: a page of a long manual is searched for 13 characters in microseconds,
    # where the pattern alone took a fifth of a millisecond)
    if not any(mark in text for mark in _MARKS) or _NEXT_TO_LETTER.search(text) is None:
        return text
    sites = [m.start() for m in _ACCENT.finditer(text) if not _apostrophe(text, m.start())]
    before = after = 0
    for i in sites:
        onto_next = _common(_composed(text, i, i + 1))
        onto_previous = _common(_composed(text, i, i - 1))
        if onto_next and not onto_previous:
            before += 1
        elif onto_previous and not onto_next:
            after += 1
    chars = list(text)
    changed = False
    for i in sites:
        sides = (i + 1, i - 1) if before >= after else (i - 1, i + 1)
        if not _common(_composed(text, i, sides[0])) and _common(_composed(text, i, sides[1])):
            sides = sides[::-1]  # (a¨t: ä, not ẗ)
        for j in sides:
            joined = _composed(text, i, j, chars)
            if joined:
                chars[j], chars[i] = joined, ""
                changed = True
                break
            if _is_letter(text, j):  # the chosen side has a letter, which takes no such accent
                break
    return unicodedata.normalize("NFC", "".join(chars)) if changed else text


def _common(letter: str) -> bool:
    """Whether ``letter`` is one of the accented letters of European languages (Latin-1 and
    Latin Extended-A and -B), rather than a rarer one (``ẗ``)."""
    return bool(letter) and "\u00c0" <= letter <= "\u024f"


#: An acute accent typed for an apostrophe in English: ``don´t``, ``it´s``, ``we´ll``.
_CONTRACTION = re.compile(r"(?:t|s|m|d|ll|re|ve)(?![^\W\d_])", re.IGNORECASE)


def _apostrophe(text: str, i: int) -> bool:
    return (
        text[i] == "\u00b4"
        and _is_letter(text, i - 1)
        and _CONTRACTION.match(text, i + 1) is not None
    )


def _is_letter(text: str, j: int) -> bool:
    """Whether ``text[j]`` is a letter (not one of the accents: ˆ and ˇ are modifier letters)."""
    return 0 <= j < len(text) and text[j].isalpha() and text[j] not in _MARKS


def _composed(text: str, i: int, j: int, chars: list[str] | None = None) -> str:
    """The precomposed letter of the accent at ``i`` on the letter at ``j`` ("" when ``j`` is
    no letter, or Unicode has no single letter for the two); ``chars``: the letters as joined
    so far."""
    if not _is_letter(text, j):
        return ""
    if text[i] == "`" and not _grave_allowed(text, i):
        return ""
    letter = chars[j] if chars is not None else text[j]
    letter = _DOTLESS.get(letter, letter)
    joined = unicodedata.normalize("NFC", letter + _MARKS[text[i]])
    return joined if len(joined) == 1 else ""


def _grave_allowed(text: str, i: int) -> bool:
    """A backquote is a grave accent inside a word (letters on both sides) or on the French and
    Italian one-letter words (``à``, ``è``), never at the start of a longer word (`` `ls` ``)
    nor after another quote (TeX's ````I``)."""
    previous = _is_letter(text, i - 1)
    following = _is_letter(text, i + 1)
    if previous and following:
        return True
    alone = not previous and not _is_letter(text, i + 2) and text[i - 1 : i] not in ("`", "'")
    return following and alone and text[i + 1] in "aeAE"
