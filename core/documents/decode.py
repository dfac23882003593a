"""Text files' bytes as text: a byte-order mark decides, else UTF-16 when the bytes look like it
(ASCII with a NUL in every pair), else UTF-8 when they are UTF-8, else the legacy encoding
charset-normalizer finds (CP1251, GB18030, Shift-JIS, EUC-KR, Big5... as files saved on
Windows in those locales are), else UTF-8 with the undecodable bytes replaced; and whether a
document's text is language at all (:func:`undecodable`)."""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections import Counter

from core.documents.legacy import is_mojibake

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),  # before UTF-16 LE, whose mark it starts with
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def decode_text(data: bytes) -> str:
    """``data`` as text (never fails: what cannot be decoded becomes U+FFFD)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace")
    utf16 = _utf16_without_bom(data)  # (NUL-heavy ASCII is valid UTF-8: this goes first)
    if utf16 is not None:
        return data.decode(utf16, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    legacy = _legacy_encoding(data)
    return data.decode(legacy or "utf-8", errors="replace")


#: The encodings a text file is told apart in when it is not UTF-8: what systems of today
#: save text in for a locale (Windows' code pages, ISO-8859, KOI8, the East Asian multi-byte
#: ones), most used first (it breaks ties). Mac OS 9's, HP's and most DOS code pages are left
#: out: charset-normalizer ranks them first on short Russian or Finnish text (mac_cyrillic,
#: hp_roman8), where they differ from the code page the file was saved in.
TEXT_ENCODINGS = (
    "cp1252",
    "cp1250",
    "cp1251",
    "gb18030",
    "cp932",
    "cp949",
    "big5",
    "euc_jp",
    "iso2022_jp",
    "cp1253",
    "cp1254",
    "cp1255",
    "cp1256",
    "cp1257",
    "cp1258",
    "koi8_r",
    "koi8_u",
    "cp866",
    "cp874",
    "iso8859_2",
    "iso8859_5",
    "iso8859_7",
    "iso8859_8",
    "iso8859_9",
    "iso8859_13",
    "iso8859_15",
)


def _legacy_encoding(data: bytes) -> str | None:
    """The one of :data:`TEXT_ENCODINGS` that charset-normalizer finds most likely for bytes
    that are not UTF-8 (None: none fits, e.g. a binary file); of those it ranks equal, the most
    used (it puts CP1250 first on Spanish or French text that CP1252 reads exactly as well, and
    there they differ: ñ, è read as ń, č)."""
    from charset_normalizer import from_bytes

    matches = from_bytes(data, cp_isolation=list(TEXT_ENCODINGS))
    best = matches.best()
    if best is None:
        return None
    tied = [
        match
        for match in matches
        if match.encoding in TEXT_ENCODINGS
        and abs(match.chaos - best.chaos) < 1e-3
        and abs(match.coherence - best.coherence) < 1e-3
    ]
    return min(tied, key=lambda m: TEXT_ENCODINGS.index(m.encoding), default=best).encoding


def _utf16_without_bom(data: bytes) -> str | None:
    """``"utf-16-le"``/``"utf-16-be"`` when most characters of ``data``'s start are ASCII in
    UTF-16 (one NUL byte in every pair, on the same side), else None."""
    sample = data[:4096]
    pairs = len(sample) // 2
    if pairs < 2:
        return None
    odd = sample[1::2].count(0)  # high bytes of little-endian ASCII
    even = sample[0::2].count(0)
    if odd >= 0.6 * pairs and even < 0.1 * pairs:
        return "utf-16-le"
    if even >= 0.6 * pairs and odd < 0.1 * pairs:
        return "utf-16-be"
    return None


#: Glyph names or CIDs in place of characters, as broken extractions print them: ``/g437/g258``,
#: ``/uni0041``, ``(cid:437)``.
_GLYPH_NAMES = re.compile(r"(?:/(?:g|gid|glyph|uni|cid|c)[0-9A-Fa-f]{1,5}|\(cid:\d{1,5}\))")
#: Below this many letters a text is too short to judge.
_SHORTEST = 12


def undecodable(text: str) -> bool:
    """Whether ``text`` is what a font without a usable character map gives, not language:
    more than a quarter of it private-use, unassigned, replacement or control characters, or
    glyph names (``/g437/g258``, ``(cid:12)``); or letters scattered over many scripts (glyph
    ids taken for code points: ``ಣЬᄝֹݥ``), or mostly from Latin Extended-A/B and IPA (small
    glyph ids taken for code points: ``ƵĂóůŝ``), or words made of Latin-1 letters (a legacy
    8-bit font's codes taken for Latin-1: ``Áëàãîäàðíîñòè``, :func:`core.documents.legacy.
    is_mojibake`; a PDF's pages are decoded again before they are judged). A short text is
    never judged."""
    # Counted per distinct character: a page has a few hundred of them and thousands of
    # characters, and PDFium reads a page in less time than a loop over its characters takes.
    visible = {c: n for c, n in Counter(text).items() if not c.isspace()}
    seen = sum(visible.values())
    if seen < _SHORTEST:
        return False
    names = sum(len(m) for m in _GLYPH_NAMES.findall(text))
    broken = sum(n for c, n in visible.items() if _is_broken(c))
    if (names + broken) / seen > 0.25:
        return True
    letters = {c: n for c, n in visible.items() if unicodedata.category(c).startswith("L")}
    letter_count = sum(letters.values())
    if letter_count < _SHORTEST:
        return False
    scripts: Counter[str] = Counter()
    for c, n in letters.items():
        scripts[_script(c)] += n
    top_two = sum(count for _, count in scripts.most_common(2))
    if len(scripts) >= 4 and top_two < 0.8 * letter_count:
        return True
    extended = sum(n for c, n in letters.items() if 0x0100 <= ord(c) <= 0x02AF)
    return extended > 0.4 * letter_count or is_mojibake(text)


def _is_broken(char: str) -> bool:
    category = unicodedata.category(char)
    return category in ("Co", "Cn", "Cs", "Cc") or char == "\ufffd"


def _script(char: str) -> str:
    """A letter's script, as the first word of its Unicode name (LATIN, CJK, CYRILLIC...;
    HIRAGANA and KATAKANA count with CJK, HANGUL apart)."""
    first = unicodedata.name(char, "UNKNOWN").split(" ", 1)[0]
    return "CJK" if first in ("HIRAGANA", "KATAKANA", "KATAKANA-HIRAGANA") else first
