"""Text that an 8-bit legacy font gave as Latin-1 letters, decoded again.

Legacy TeX and word-processor PDFs set Cyrillic in CP1251 or KOI8-R fonts and Thai in TIS-620
ones, with no ``ToUnicode`` map and no encoding a reader can map. PDFium then returns each
8-bit font code as the Latin-1 (or CP1252) character of the same number: "Благодарности" comes
out as ``Áëàãîäàðíîñòè``, "บทแนะนำ" as ``º·á¹Ð¹Ó``. Such text is judged by its words, not its
characters: real Latin-1 languages (French, German, Icelandic...) have a few accented letters
in a word, these have words made mostly of them (:func:`is_mojibake`).

Which legacy encoding the codes were in is chosen by charset-normalizer (its letter
frequencies tell CP1251 from KOI8-R, which a check of the script alone cannot), among
:data:`ENCODINGS`; the first of its answers whose decoding gives words of one script is kept
(:func:`redecoded`: most characters letters of that script, in words cased as words are). On
the Russian, Ukrainian, Bulgarian and Thai lshort of Debian's texlive-lang-cyrillic and
texlive-lang-other, cut into pieces of 120 characters, it chose right 95-99 % of the time
(from 250 characters: 96-100 %), where a scorer of the script alone (how much of the text
becomes words of one script, cased as words) chose right for 1-17 % of the Russian, Bulgarian
and KOI8-U pieces: every Cyrillic encoding makes Cyrillic words of them. Asked about every
page with accented letters of the 393 PDFs of eight texlive-lang packages, it named a
non-Latin encoding or none for 150 of 2,671, French and Spanish pages among them: it is
asked only about text :func:`is_mojibake` already judged (bench/README.md, "Legacy-encoded
PDFs").
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from functools import cache

#: The legacy 8-bit encodings tried: Cyrillic, Thai, Greek, Hebrew and Arabic.
ENCODINGS = (
    "cp1251",
    "koi8_r",
    "koi8_u",
    "iso8859_5",
    "tis_620",
    "cp1253",
    "iso8859_7",
    "cp1255",
    "cp1256",
)
#: A run of four or more characters that are not spaces, ASCII digits or ASCII punctuation.
_TOKEN = re.compile(r"[^\s!-@\[-`{-~]{4,}")
#: Three Latin-1 letters or signs in a row: a page without one is never judged further.
_HIGH_RUN = re.compile(r"[\u00a1-\u00ff]{3}")
#: A page is mojibake when this share of its tokens' characters is in tokens made mostly of
#: Latin-1 letters and signs... (real Latin-1 pages: at most 0.04; legacy Cyrillic and Thai
#: pages: 0.2-1.0, mostly-English pages of a Thai book down to 0.09)
_MOJIBAKE_SHARE = 0.12
#: ... and those tokens use at least this many distinct such characters (a language's
#: letters, not one box-drawing sign repeated).
_DISTINCT = 12
#: A decoding is kept when this share of the decoded tokens' characters is in words of one
#: script other than Latin.
_ONE_SCRIPT_SHARE = 0.8


def _high(char: str) -> bool:
    return "\u00a0" <= char <= "\u00ff"


def _heavy_tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text) if 2 * sum(1 for c in t if _high(c)) > len(t)]


def is_mojibake(text: str) -> bool:
    """Whether ``text`` reads as the 8-bit codes of a legacy font taken for Latin-1: at least
    ``_MOJIBAKE_SHARE`` of its words' characters are in words made mostly of Latin-1 letters
    (``Áëàãîäàðíîñòè``), with at least ``_DISTINCT`` different ones."""
    if _HIGH_RUN.search(text) is None:
        return False
    tokens = _TOKEN.findall(text)
    total = sum(len(t) for t in tokens)
    heavy = _heavy_tokens(text)
    distinct = {c for t in heavy for c in t if _high(c)}
    return (
        bool(total)
        and sum(map(len, heavy)) >= _MOJIBAKE_SHARE * total
        and (len(distinct) >= _DISTINCT)
    )


def redecoded(text: str, likely: str | None = None) -> tuple[str, str] | None:
    """``text``'s Latin-1 letters as the legacy encoding they were codes of (a mojibake page,
    :func:`is_mojibake`), and that encoding: ``likely`` (the one an earlier page of the same
    document was in) when its decoding gives words of one script, else the first that
    charset-normalizer finds likely and does, else the only one of :data:`ENCODINGS` that does;
    None when none does. Characters that were not 8-bit codes (ASCII, other fonts' Unicode)
    stay as they are."""
    if likely is not None:
        decoded = text.translate(_table(likely))
        if _one_script(decoded):
            return decoded, likely
    from charset_normalizer import from_bytes

    for match in from_bytes(_codes(text), cp_isolation=list(ENCODINGS), threshold=1.0):
        if match.encoding in ENCODINGS:
            decoded = text.translate(_table(match.encoding))
            if _one_script(decoded):
                return decoded, match.encoding
    # (charset-normalizer finds nothing likely in some short or formula-heavy pages)
    passing = {text.translate(_table(e)): e for e in ENCODINGS}
    passing = {decoded: e for decoded, e in passing.items() if _one_script(decoded)}
    return next(iter(passing.items())) if len(passing) == 1 else None


def _codes(text: str) -> bytes:
    """The 8-bit codes behind ``text`` as far as they matter for guessing their encoding:
    ASCII and Latin-1 letters and signs as themselves, anything else as a space."""
    return bytes(ord(c) if ord(c) < 0x80 or "\u00a1" <= c <= "\u00ff" else 0x20 for c in text)


#: Thai fonts of the TLWG (thailatex's LTH encoding: fonts-tlwg's lthtlwg.enc, in Debian's
#: texlive-lang-other) put shifted forms of Thai marks at codes that TIS-620 leaves undefined
#: (the Russian lshort has none; the Thai one, lsh132.pdf, has them on most pages).
_TLWG_FORMS = {
    0x80: "\u0e10", 0x81: "\u0e34", 0x82: "\u0e35", 0x83: "\u0e36", 0x84: "\u0e37",
    0x86: "\u0e48", 0x87: "\u0e49", 0x88: "\u0e4a", 0x89: "\u0e4b", 0x8A: "\u0e4c",
    0x8B: "\u0e48", 0x8C: "\u0e49", 0x8D: "\u0e4a", 0x8E: "\u0e4b", 0x8F: "\u0e4c",
    0x90: "\u0e0d", 0x98: "\u0e31", 0x99: "\u0e4d", 0x9A: "\u0e47", 0x9B: "\u0e48",
    0x9C: "\u0e49", 0x9D: "\u0e4a", 0x9E: "\u0e4b", 0x9F: "\u0e4c",
}  # fmt: skip


@cache
def _table(encoding: str) -> dict[int, str]:
    """A translation from what PDFium shows for each 8-bit code to that code's letter, mark or
    digit in ``encoding`` (signs and undefined codes are left as they are). PDFium shows a code
    from 0xA0 as its Latin-1 character, one below as its CP1252 character or as the C1 control
    of the same number, depending on the font."""
    table: dict[int, str] = {}
    for code in range(0x80, 0x100):
        try:
            meant = bytes([code]).decode(encoding)
        except UnicodeDecodeError:
            meant = ""
        if encoding == "tis_620":  # (which leaves 0x80-0x9F to the C1 controls)
            meant = _TLWG_FORMS.get(code, meant)
        if not meant or unicodedata.category(meant)[0] not in "LMN":
            continue
        shown = [chr(code)]
        if code < 0xA0:
            shown.append(bytes([code]).decode("cp1252", errors="ignore"))
        for char in shown:
            if char and char != meant:
                table[ord(char)] = meant
    return table


def _one_script(decoded: str) -> bool:
    """Whether the words of ``decoded`` that are not ASCII read as words of one script other
    than Latin: at least ``_ONE_SCRIPT_SHARE`` of their characters are letters, marks or
    digits of that script (a Latin "i" in a Ukrainian word, as old Ukrainian fonts set "і", is
    allowed for; Latin letters with an Arabic one in each word are not), and as much is in words
    cased as words are (lower case, Capitalised or all capitals: an Armenian ArmSCII-8 text
    taken for ISO-8859-5 is Cyrillic letters, "аГлГыяГнЧ", but no words)."""
    words = [t for t in _TOKEN.findall(decoded) if not t.isascii()]
    total = sum(map(len, words))
    scripts: Counter[str] = Counter()
    cased = 0
    for word in words:
        for char in word:
            if unicodedata.category(char)[0] in "LMN":
                scripts[unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]] += 1
        if _cased_as_a_word(word):
            cased += len(word)
    scripts.pop("LATIN", None)
    needed = _ONE_SCRIPT_SHARE * total
    return bool(scripts) and scripts.most_common(1)[0][1] >= needed and cased >= needed


def _cased_as_a_word(word: str) -> bool:
    """Whether ``word`` is lower case, Capitalised or all capitals (a script without case
    always is)."""
    return not any(c.isupper() for c in word[1:]) or not any(c.islower() for c in word)
