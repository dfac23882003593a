"""Text files' bytes as text: a byte-order mark decides, else UTF-16 when the bytes look like it
(ASCII with a NUL in every pair), else UTF-8 with the undecodable bytes replaced."""

from __future__ import annotations

import codecs

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
    return data.decode("utf-8", errors="replace")


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
