"""Real PDF files for the tests, written object by object (a catalog, a page tree, pages whose
content streams show text in Helvetica, an xref table and a trailer), and the pathological
ones: a decompression bomb, thousands of pages, a page tree thousands of levels deep."""

from __future__ import annotations

import io
import zlib
from collections.abc import Sequence

FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"


def _escape(text: str) -> bytes:
    raw = text.encode("cp1252", "replace")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def content_stream(lines: Sequence[str]) -> bytes:
    """A page's content: each line shown on its own line, top down."""
    ops = [b"BT /F1 11 Tf 14 TL 56 780 Td"]
    for line in lines:
        ops.append(b"(" + _escape(line) + b") Tj T*")
    ops.append(b"ET")
    return b"\n".join(ops)


def stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d %s>>\nstream\n" % (len(data), extra) + data + b"\nendstream"


def write_pdf(
    objects: Sequence[bytes], *, info: bytes | None = None, catalog_last: bool = False
) -> bytes:
    """A PDF of ``objects`` (object 1 is the catalog; numbered from 1 in order), with an
    information dictionary ``info`` appended as the last object when given. ``catalog_last``
    writes the catalog after every other object (as many producers do)."""
    bodies = list(objects) + ([info] if info is not None else [])
    out = io.BytesIO()
    out.write(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = [0] * len(bodies)
    order = [*range(1, len(bodies)), 0] if catalog_last else range(len(bodies))
    for index in order:
        offsets[index] = out.tell()
        out.write(b"%d 0 obj\n" % (index + 1) + bodies[index] + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(bodies) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    info_ref = b" /Info %d 0 R" % len(bodies) if info is not None else b""
    out.write(b"trailer\n<< /Size %d /Root 1 0 R%s >>\n" % (len(bodies) + 1, info_ref))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def _info(title: str | None, created: str | None) -> bytes | None:
    if title is None and created is None:
        return None
    parts = []
    if title is not None:
        parts.append(b"/Title (" + _escape(title) + b")")
    if created is not None:
        parts.append(b"/CreationDate (" + created.encode() + b")")
    return b"<< " + b" ".join(parts) + b" >>"


def make_pdf(
    pages: Sequence[Sequence[str]],
    *,
    title: str | None = None,
    created: str | None = None,
    compress: bool = False,
    catalog_last: bool = False,
) -> bytes:
    """A PDF whose page i shows the lines ``pages[i]``; objects: 1 catalog, 2 pages, 3 font,
    then each page and its content stream."""
    count = len(pages)
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count,
        FONT,
    ]
    for i, lines in enumerate(pages):
        content = content_stream(lines)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        if compress:
            objects.append(stream(zlib.compress(content), b"/Filter /FlateDecode "))
        else:
            objects.append(stream(content))
    return write_pdf(objects, info=_info(title, created), catalog_last=catalog_last)


#: Chinese text set the way TeX's CJK packages and dvipdfmx set it: a Type 0 font with the
#: Identity-H encoding over a CID font of the Adobe-GB1 collection, and no ToUnicode map. A
#: character's code is its Adobe-GB1 CID (looked up in Adobe's UniGB-UCS2-H CMap, BSD-3-Clause,
#: as shipped in Debian's poppler-data): only a reader that knows the collection's CIDs gets the
#: text; one that takes Identity-H codes for UTF-16 (pypdf) gets mojibake.
GB1_CIDS = {
    "热": 3235, "泵": 1068, "在": 4381, "严": 4088, "寒": 1893, "地": 1465, "区": 3189,
    "的": 1445, "冬": 1515, "季": 2097, "性": 3999, "能": 2879, "：": 287, "零": 2604,
    "下": 3887, "二": 1597, "十": 3397, "度": 1543, "时": 3400, "仍": 3247, "保": 1036,
    "持": 1275, "较": 2208, "高": 1754, "效": 3954, "比": 1073, "。": 98, "固": 1829,
    "态": 3583, "电": 1480, "池": 1277, "目": 2850, "录": 2659, "第": 1467, "一": 4162,
    "章": 4451, "手": 3437, "册": 1192, "页": 4154, "北": 1050, "方": 1626, "源": 4343,
    "研": 4089, "究": 2286, "所": 3566,
}  # fmt: skip
CJK_FONT = [
    b"<< /Type /Font /Subtype /Type0 /BaseFont /STSong-Light /Encoding /Identity-H "
    b"/DescendantFonts [4 0 R] >>",
    b"<< /Type /Font /Subtype /CIDFontType0 /BaseFont /STSong-Light "
    b"/CIDSystemInfo << /Registry (Adobe) /Ordering (GB1) /Supplement 2 >> "
    b"/FontDescriptor 5 0 R /DW 1000 >>",
    b"<< /Type /FontDescriptor /FontName /STSong-Light /Flags 6 /FontBBox [-25 -254 1000 880] "
    b"/ItalicAngle 0 /Ascent 880 /Descent -120 /CapHeight 880 /StemV 93 >>",
]


def _gb1_cid(char: str) -> int:
    """A character's Adobe-GB1 CID (printable ASCII is CIDs 1-95, in order)."""
    return GB1_CIDS.get(char) or ord(char) - 31


def cjk_pdf(pages: Sequence[Sequence[str]]) -> bytes:
    """A PDF whose page i shows the Chinese lines ``pages[i]`` (``GB1_CIDS`` and ASCII)
    in an Adobe-GB1 CID font; objects: 1 catalog, 2 pages, 3-5 the font, then each page and
    its content stream."""
    count = len(pages)
    kids = b" ".join(b"%d 0 R" % (6 + 2 * i) for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count,
        *CJK_FONT,
    ]
    for i, lines in enumerate(pages):
        ops = [b"BT /F1 12 Tf 16 TL 56 780 Td"]
        for line in lines:
            codes = "".join(f"{_gb1_cid(ch):04X}" for ch in line)
            ops.append(b"<" + codes.encode() + b"> Tj T*")
        ops.append(b"ET")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (7 + 2 * i)
        )
        objects.append(stream(b"\n".join(ops)))
    return write_pdf(objects)


#: What fonts without a usable character map give (ids for characters): a TrueType CID font
#: of the Identity ordering, embedded without its ToUnicode map, as some PDF printers write it.
GARBLED_FONT = [
    b"<< /Type /Font /Subtype /Type0 /BaseFont /ABCDEE+Calibri /Encoding /Identity-H "
    b"/DescendantFonts [4 0 R] >>",
    b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /ABCDEE+Calibri "
    b"/CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> "
    b"/FontDescriptor 5 0 R >>",
    b"<< /Type /FontDescriptor /FontName /ABCDEE+Calibri /Flags 4 /FontBBox [0 0 1000 1000] "
    b"/ItalicAngle 0 /Ascent 900 /Descent -100 /CapHeight 700 /StemV 80 >>",
]


def garbled_pdf(pages: int = 2, *, readable: Sequence[str] = ()) -> bytes:
    """``pages`` pages whose text is glyph ids (Latin Extended letters when taken for
    characters), then one readable page per line of ``readable`` in Helvetica; objects: 1
    catalog, 2 pages, 3-5 the garbled font, 6 Helvetica, then each page and its content."""
    count = pages + len(readable)
    kids = b" ".join(b"%d 0 R" % (7 + 2 * i) for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count,
        *GARBLED_FONT,
        FONT,
    ]
    ids = "".join(f"{g:04X}" for g in (0x1B5, 0x102, 0xF3, 0x16F, 0x15D, 0x17E, 0x1A1, 0x14B))
    contents = [b"BT /F1 11 Tf 14 TL 56 780 Td" + b" <%s> Tj T*" % ids.encode() * 12 + b" ET"]
    contents *= pages
    contents += [b"BT /F2 11 Tf 56 780 Td (" + _escape(line) + b") Tj ET" for line in readable]
    for i, content in enumerate(contents):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
            b"/Resources << /Font << /F1 3 0 R /F2 6 0 R >> >> /Contents %d 0 R >>" % (8 + 2 * i)
        )
        objects.append(stream(content))
    return write_pdf(objects)


def wrap(text: str, width: int = 90) -> list[str]:
    """``text`` as the lines of a page, at most ``width`` characters each."""
    lines: list[str] = []
    for word in text.split():
        if lines and len(lines[-1]) + 1 + len(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


#: The body of :func:`report_pdf`: what a reader of the report should find.
REPORT_FACTS = (
    "Field trials in Oslo found that air-source heat pumps kept a seasonal coefficient of "
    "performance of 2.9 through a winter averaging minus 15 C, well above resistance heating.",
    "Cold-climate heat pump models with vapour injection compressors delivered 80 percent of "
    "their rated heating capacity at minus 25 C in the trials, so few homes needed a backup.",
    "Installation costs for heat pumps in cold climates averaged 14,000 euros per home, and "
    "the national subsidy covered 40 percent of that cost for households that joined the trial.",
)
#: The report's front and back matter, none of which should reach a prompt.
REPORT_MATTER = (
    "Northern Energy Institute",
    "Prepared for the Ministry of Energy",
    "Heat pumps in cold climates: field data",
    "Smith, J. and Berg, K. (2024). Heat pumps in cold climates",
)


def report_pdf(**options: bool) -> bytes:
    """A six-page report on heat pumps in cold climates: a cover, a table of contents, three
    pages of body (one fact of :data:`REPORT_FACTS` each, among filler) and a page of
    references that repeat the topic's words in every line."""
    filler = (
        "The institute collected measurements from 120 homes across three regions over two "
        "heating seasons, with meters on every unit and on the household supply. "
    )
    cover = [
        "Heat Pumps in Cold Climates",
        "Annual Report 2026",
        "Northern Energy Institute",
        "Prepared for the Ministry of Energy",
    ]
    contents = [
        "Contents",
        "1 Heat pumps in cold climates: an introduction .......... 3",
        "2 Heat pumps in cold climates: field data .......... 4",
        "3 Heat pump costs in cold climates .......... 5",
        "References .......... 6",
    ]
    body = [wrap(filler * 2 + fact + " " + filler) for fact in REPORT_FACTS]
    references = ["References"] + [
        f"[{i}] Smith, J. and Berg, K. ({2010 + i}). Heat pumps in cold climates, part {i}: "
        f"heat pump performance in winter. Energy Journal {i}(2), 1-20."
        for i in range(1, 13)
    ]
    references[1] = (
        "[1] Smith, J. and Berg, K. (2024). Heat pumps in cold climates: heat pump "
        "performance in winter. Energy Journal 1(2), 1-20."
    )
    return make_pdf(
        [cover, contents, *body, references],
        title="Heat pumps in cold climates",
        created="D:20260115093000+01'00'",
        **options,
    )


def image_only_pdf(pages: int = 2) -> bytes:
    """Pages that draw (a grey rectangle, as a scan would be an image) but show no text."""
    kids = b" ".join(b"%d 0 R" % (3 + 2 * i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
    ]
    for i in range(pages):
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents %d 0 R >>"
            % (4 + 2 * i)
        )
        objects.append(stream(b"0.5 g 56 56 483 730 re f"))
    return write_pdf(objects)


def deflate_bomb(size: int) -> bytes:
    """A zlib stream of ``size`` zero bytes (a multiple of 1 MiB) in about ``size / 1000``
    bytes: one 1 MiB block compressed after a full flush comes out the same every time, so it
    is compressed once and repeated (with the right Adler-32 at the end)."""
    block = b"\0" * (1 << 20)
    packer = zlib.compressobj(9)
    first = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    blocks = size >> 20
    # Adler-32 of n zeros: the sum of bytes stays 1, the sum of sums grows by 1 per byte.
    adler = ((size % 65521) << 16) | 1
    # The final empty block, then the checksum (big-endian).
    end = b"\x03\x00" + adler.to_bytes(4, "big")
    return first + again * (blocks - 1) + end


def bomb_pdf(size: int = 4 << 30) -> bytes:
    """One page whose content stream inflates to ``size`` bytes of zeros (4 GiB: 4 MB)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        FONT,
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 5 0 R >>",
        stream(deflate_bomb(size), b"/Filter /FlateDecode "),
    ]
    return write_pdf(objects)


def many_pages_pdf(count: int = 5000) -> bytes:
    """``count`` pages, page i saying so (pages share one content stream per ten)."""
    return make_pdf([[f"Page {i + 1} of {count}: heat pumps and the grid."] for i in range(count)])


def deep_tree_pdf(depth: int = 5000) -> bytes:
    """A page tree ``depth`` levels deep: each /Pages node's kids are a page and the next
    node. Objects: 1 catalog, 2 font, 3 a content stream, then (node, page) per level."""
    objects = [b"<< /Type /Catalog /Pages 4 0 R >>", FONT, stream(content_stream(["Deep."]))]
    for level in range(depth):
        node, page, child = 4 + 2 * level, 5 + 2 * level, 6 + 2 * level
        parent = b" /Parent %d 0 R" % (node - 2) if level else b""
        kids = b"%d 0 R" % page + (b" %d 0 R" % child if level < depth - 1 else b"")
        count = depth - level
        objects.append(b"<< /Type /Pages /Kids [%s] /Count %d%s >>" % (kids, count, parent))
        objects.append(
            b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] "
            b"/Resources << /Font << /F1 2 0 R >> >> /Contents 3 0 R >>" % node
        )
    return write_pdf(objects)


def encrypted_pdf(pdf: bytes, user_password: str, owner_password: str = "owner") -> bytes:
    """``pdf`` encrypted with pypdf's writer (AES-256)."""
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=io.BytesIO(pdf))
    writer.encrypt(user_password, owner_password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(*, title: str | None = None, year: int = 2025) -> bytes:
    import datetime as dt

    import docx

    document = docx.Document()
    document.add_heading("Heat pumps in winter", level=1)
    document.add_paragraph("Heat pumps keep working at minus 20 C.")
    table = document.add_table(rows=2, cols=2)
    for r, row in enumerate((("Model", "COP"), ("A-1", "3.1"))):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    document.add_paragraph("The end.")
    document.core_properties.title = title or ""
    document.core_properties.created = dt.datetime(year, 6, 1, 12, 0, tzinfo=dt.UTC)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


#: Words the pages of :func:`topic_pdf` are filled with around their sentences on the topic.
_FILLER = (
    "measured results season region report household supply demand cost policy analysis "
    "survey sample method table figure annex trend estimate baseline scenario"
).split()


def topic_pdf(topic: str, pages: int = 30, *, seed: int = 0) -> bytes:
    """A ``pages``-page report about ``topic``, like a real one a search finds: a title page,
    then pages of about 2,800 characters of compressed text each (about 36 lines), every page with
    a few sentences naming the topic (so its passages are relevant to a query on it) among
    filler. Deterministic for a topic and ``seed``."""
    import hashlib
    import random

    rng = random.Random(hashlib.sha1(f"{seed}:{topic}".encode()).digest())
    body: list[list[str]] = [[topic.title(), "A report in " + str(pages) + " pages", ""]]
    for number in range(2, pages + 1):
        facts = (
            f"On page {number}, the report on {topic} finds that adoption rose "
            f"{10 + number % 17} percent in 2026 across the regions studied.",
            f"Costs of {topic} fell {3 + number % 9} percent a year, while regulation and "
            f"demand remained the main drivers named by the analysts on page {number}.",
            f"Open risks for {topic} listed on page {number} range from supply constraints "
            "to unclear long-term effects.",
        )
        text = " ".join(
            " ".join(rng.choice(_FILLER) for _ in range(14)) + ". " + fact for fact in facts
        )
        while len(text) < 2800:
            text += " " + " ".join(rng.choice(_FILLER) for _ in range(12)) + "."
        lines = wrap(text, 80)
        body.append(lines)
    return make_pdf(body, title=topic, compress=True)


# --- legacy 8-bit fonts and TeX's accents (issue 51, item 7) ----------------------------------


RUSSIAN = [
    "Тепловые насосы в холодном климате.",
    "Благодарности авторам полевых испытаний этой зимой.",
    "Сезонный коэффициент преобразования составил три целых одну десятую.",
    "Монтажники сообщили, что компрессор работал без отказов.",
]
THAI = [
    "ปั๊มความร้อนในสภาพอากาศหนาวเย็น",
    "ผลการทดลองภาคสนามในฤดูหนาวที่ผ่านมา",
    "ค่าสัมประสิทธิ์สมรรถนะตามฤดูกาลเฉลี่ยสามจุดหนึ่ง",
    "ช่างติดตั้งรายงานว่าคอมเพรสเซอร์ทำงานได้ดีตลอดฤดู",
]


def tlwg(text: str) -> bytes:
    """``text`` as thailatex sets it in TLWG's fonts: TIS-620, with a tone mark over an upper
    vowel at its raised form, 0x8B-0x8F (lthtlwg.enc in Debian's texlive-lang-other: codes
    139-143 are uni0E48-uni0E4C)."""
    codes = bytearray(text.encode("tis_620"))
    for i in range(1, len(codes)):
        if 0xE8 <= codes[i] <= 0xEC and codes[i - 1] in (0xD1, 0xD4, 0xD5, 0xD6, 0xD7, 0xE7):
            codes[i] = 0x8B + codes[i] - 0xE8
    return bytes(codes)


def _legacy_font(codes: set[int], *, truetype: bool) -> list[bytes]:
    """A font with no ``ToUnicode`` map whose ``Differences`` name its glyphs as no reader
    maps them, so PDFium gives each 8-bit code as the Latin-1 (or CP1252, or C1) character of
    that number. Type 3 (objects: the font, one glyph procedure): how pdfTeX writes the bitmap
    fonts of Metafont (PK), naming code N ``/aN``; the Russian lshort of Debian's
    texlive-lang-cyrillic (lshortru.pdf, pdfTeX-0.14h) sets its Cyrillic so. TrueType (the
    font, its descriptor): how thailatex set Thai in TLWG's Norasi, naming the glyphs
    ``/ThaiCharacter...`` (lsh132.pdf in texlive-lang-other, pdfTeX-0.14f; not embedded here)."""
    if truetype:
        names = b" ".join(b"%d /ThaiCharacter%X" % (c, c) for c in sorted(codes) if c > 127)
        return [
            b"<< /Type /Font /Subtype /TrueType /BaseFont /Norasi /FirstChar 32 /LastChar 255 "
            b"/Widths ["
            + b" 500" * 224
            + b"] /Encoding << /Type /Encoding /Differences ["
            + names
            + b"] >> /FontDescriptor 4 0 R >>",
            b"<< /Type /FontDescriptor /FontName /Norasi /Flags 4 /FontBBox [-401 -366 1050 830] "
            b"/ItalicAngle 0 /Ascent 800 /Descent -200 /CapHeight 466 /StemV 69 >>",
        ]
    names = b" ".join(b"%d /a%d" % (c, c) for c in sorted(codes))
    procs = b" ".join(b"/a%d 4 0 R" % c for c in sorted(codes))
    return [
        b"<< /Type /Font /Subtype /Type3 /FontMatrix [0.011 0 0 0.011 0 0] "
        b"/FontBBox [-4 -40 148 120] /Resources << >> /FirstChar 0 /LastChar 255 /Widths ["
        + b" 50" * 256
        + b"] /Encoding << /Type /Encoding /Differences ["
        + names
        + b"] >> /CharProcs << "
        + procs
        + b" >> >>",
        stream(b"50 0 0 0 40 60 d1 0 0 40 60 re f"),
    ]


def legacy_pdf(pages: Sequence[Sequence[bytes]], *, truetype: bool = False) -> bytes:
    """A PDF whose page i shows the lines ``pages[i]``, each the 8-bit codes of a legacy font
    (:func:`_legacy_font`: Type 3, or ``truetype``); objects: 1 catalog, 2 pages, 3-4 the
    font, then each page and its content stream."""
    count = len(pages)
    codes = {c for lines in pages for line in lines for c in line}
    kids = b" ".join(b"%d 0 R" % (5 + 2 * i) for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count,
        *_legacy_font(codes, truetype=truetype),
    ]
    for i, lines in enumerate(pages):
        ops = [b"BT /F1 11 Tf 14 TL 56 780 Td"]
        for line in lines:
            escaped = line.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")
            ops.append(b"(" + escaped + b") Tj T*")
        ops.append(b"ET")
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (6 + 2 * i)
        )
        objects.append(stream(b"\n".join(ops)))
    return write_pdf(objects)


#: Times-Roman in WinAnsiEncoding, whose 0xA8 and 0xB4 are the spacing diaeresis and acute.
TIMES = b"<< /Type /Font /Subtype /Type1 /BaseFont /Times-Roman /Encoding /WinAnsiEncoding >>"


def shown_pdf(pages: Sequence[Sequence[bytes]], font: bytes = TIMES) -> bytes:
    """A PDF whose page i shows each text-showing operand of ``pages[i]`` (a ``(...) Tj`` or
    ``[...] TJ``, as written) on a line of its own, in ``font``."""
    count = len(pages)
    kids = b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % count,
        font,
    ]
    for i, shows in enumerate(pages):
        content = b"BT /F1 11 Tf 14 TL 56 780 Td " + b" T* ".join(shows) + b" ET"
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append(stream(content))
    return write_pdf(objects)
