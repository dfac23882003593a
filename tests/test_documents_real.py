"""Documents as the world makes them (issue 33, item 2): Chinese set by TeX, fonts without a
character map, running headers and footers, a contents page in Chinese.

The files are written object by object in tests/pdfs.py in the shape the real producers write
(each fixture's docstring says which); the real worker processes read them with PDFium.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from core.documents import DocumentExtractor, DocumentUnreadable
from core.documents.accents import joined_accents
from core.documents.attachments import file_title
from core.documents.decode import undecodable
from core.documents.extract import read_page, select, split_passages
from core.documents.matter import without_running_lines
from core.engine.sources import NumberedSource, writer_source_blocks
from core.models import AttachedFile
from core.pages.fetch import PageFetcher
from core.pages.reader import PageReader
from tests.cli import fathom
from tests.fakes import FakeLLMServer, FakeSearchServer
from tests.fakes.server import BackgroundServer
from tests.pdfs import (
    RUSSIAN,
    THAI,
    cjk_pdf,
    garbled_pdf,
    legacy_pdf,
    make_pdf,
    shown_pdf,
    tlwg,
    wrap,
)

HEAT_PUMPS = ["热泵在严寒地区的冬季性能：", "零下二十度时仍能保持较高的能效比。"]


@pytest.fixture
async def extractor() -> AsyncIterator[DocumentExtractor]:
    async with DocumentExtractor(timeout=30.0) as documents:
        yield documents


async def test_chinese_set_by_tex_is_read_as_chinese(extractor: DocumentExtractor) -> None:
    """lshort-zh-cn.pdf and cnbook.pdf (Debian's texlive-lang-chinese) set their text in
    Adobe-GB1 CID fonts under Identity-H with no ToUnicode map: pypdf read none of their CJK
    characters (mojibake, then cited as read); PDFium knows the collection."""
    pdf = cjk_pdf([HEAT_PUMPS])
    document = await extractor.extract(pdf, "pdf")
    assert document.text == "热泵在严寒地区的冬季性能：\n零下二十度时仍能保持较高的能效比。"
    from pypdf import PdfReader  # the naive reader, to show the fixture is the hard shape

    naive = PdfReader(io.BytesIO(pdf)).pages[0].extract_text()
    assert "热泵" not in naive and undecodable(naive)


async def test_a_chinese_books_contents_and_running_header_are_left_out(
    extractor: DocumentExtractor,
) -> None:
    """A TeX book: a contents page headed "目 录" (ctexbook spaces it), then chapters whose
    every page carries the running header "第一章 热泵手册" and a page number at its foot."""
    contents = ["目 录", "第一章 热泵手册 一"]
    a, b, c = *HEAT_PUMPS, "北方能源研究所的固态电池"
    bodies = [[a, b, c], [b, c, a], [c, a, b], [a, c, b]]
    chapter = [["第一章 热泵手册", *body, str(n)] for n, body in enumerate(bodies, 2)]
    document = await extractor.extract(cjk_pdf([contents, *chapter]), "pdf")
    assert "目" not in document.text and "第一章" not in document.text
    assert document.text.count("热泵在严寒地区的冬季性能") == 4
    assert not any(line.strip().isdigit() for line in document.text.splitlines())


async def test_running_headers_and_footers_are_dropped(extractor: DocumentExtractor) -> None:
    """A manual's pages: its title at the head of every page, "Page N of 6" at the foot."""
    places = ["Oslo", "Tromso", "Kiruna", "Oulu", "Umea", "Bergen"]
    pages = [
        [
            "Heat Pump Field Manual - Northern Energy Institute",
            f"In {place} the units ran through the winter of field trials.",
            "Defrost cycles took four minutes in the coldest week.",
            f"The installers in {place} reported no failed compressor.",
            f"Page {n} of 6",
        ]
        for n, place in enumerate(places, 1)
    ]
    document = await extractor.extract(make_pdf(pages), "pdf")
    assert "Field Manual" not in document.text and "Page " not in document.text
    assert "In Kiruna the units ran through the winter" in document.text
    assert document.text.count("Defrost cycles took four minutes") == 6


def test_running_lines_need_most_pages_and_leave_a_page_of_only_them() -> None:
    twice = ["Header\nBody one.", "Header\nBody two.", "Other\nBody three.", "Other\nBody 4."]
    assert without_running_lines(twice) == twice  # two of four pages is not "most", nor three
    alone = ["Only a running line 1", "Only a running line 2", "Only a running line 3"]
    assert without_running_lines(alone) == alone


async def test_a_pdf_whose_text_did_not_decode_is_skipped_with_its_reason(
    extractor: DocumentExtractor,
) -> None:
    """A TrueType CID font of the Identity ordering, embedded without its ToUnicode map (as
    some PDF printers write Calibri): its glyph ids come out as "ƵĂóůŝ", which is no source."""
    with pytest.raises(DocumentUnreadable) as unreadable:
        await extractor.extract(garbled_pdf(3), "pdf")
    assert str(unreadable.value.reason) == "its text could not be decoded"


async def test_the_pages_that_decode_are_read_without_the_others(
    extractor: DocumentExtractor,
) -> None:
    document = await extractor.extract(garbled_pdf(2, readable=["Heat pumps work."]), "pdf")
    assert document.text == "Heat pumps work."
    assert (document.pages_read, document.pages_total) == (3, 3)


@pytest.mark.parametrize(
    ("text", "garbled"),
    [
        ("ಣЬᄝֹݥ౵࠱׫֥ྟିğ ਬ༯ؽ൅؇ൈಯିЌӻ֥ۚࢠିིб", True),  # pypdf's reading of GB1 CIDs
        ("ƵĂóůŝžơŋ ƵĂóůŝžơŋ ƵĂóůŝžơŋ", True),  # small glyph ids
        ("/g437/g258/g400/g367/g349/g3/g104/g258/g410 /g437/g258/g400", True),  # glyph names
        ("(cid:12)(cid:45)(cid:88)(cid:3)(cid:19)(cid:7) heat", True),  # pdfminer's CIDs
        ("\ue000\ue001\ue002\ue003\ue004\ue005\ue006\ue007\ue008\ue009 ok", True),  # private use
        ("Heat pumps keep working at minus 20 C in Oslo.", False),
        ("热泵在严寒地区的冬季性能：零下二十度时仍能保持较高的能效比。", False),
        ("Příliš žluťoučký kůň úpěl ďábelské ódy, řekl Šťastný.", False),  # Czech
        ("Tiếng Việt có dấu rất nhiều chữ cái đặc biệt như ơ ư ă.", False),  # Vietnamese
        ("日本語のテキストとカタカナ、そして漢字。English words too.", False),
        ("Русский текст с латиницей English и цифрами 123.", False),
        ("ƵĂó", False),  # too short to judge
    ],
)
def test_what_counts_as_text_that_did_not_decode(text: str, garbled: bool) -> None:
    assert undecodable(text) is garbled


async def test_a_web_page_of_glyph_names_is_skipped() -> None:
    """Sites that host other sites' PDFs as text serve what a broken extraction printed:
    "/g437/g258/g400..." in place of the words."""
    body = " ".join(["/g437/g258/g400/g367/g349/g3/g104/g258/g410/g3/g87/g437/g373/g393"] * 40)
    html = f"<html><head><title>Heat pumps</title></head><body><p>{body}</p></body></html>"
    app = Starlette(routes=[Route("/doc", lambda r: HTMLResponse(html))])
    with BackgroundServer(app) as site:
        async with httpx.AsyncClient(trust_env=False) as http:
            fetcher = PageFetcher(http, timeout=10.0, allow_loopback=True)
            reader = PageReader(fetcher, pages=1, budget_tokens=600)
            try:
                reading = await reader.read([f"{site.url}/doc"], "heat pumps")
            finally:
                await reader.aclose()
    assert reading.pages == []
    assert [str(s.reason) for s in reading.skipped] == ["its text could not be decoded"]


# --- a long document read in part ---------------------------------------------------------------


def manual_pdf(pages: int = 300, answer_on: int = 240) -> bytes:
    """A long manual (gnuplot's is 311 pages, R's reference 2,415): every page about heat
    pumps in general, one page with the answer to a specific question."""
    body = [
        [
            f"Chapter {n // 20 + 1}. General notes on heat pump installation, page {n}.",
            "Keep the outdoor unit clear of snow and check the refrigerant lines each season.",
            "Installers should follow the local electrical code for every connection.",
        ]
        for n in range(1, pages + 1)
    ]
    body[answer_on - 1] = [
        "Setting the XR-7 defrost interval.",
        "The XR-7 defrost interval is chosen with jumper J4: open for 30 minutes, closed for 90.",
    ]
    return make_pdf(body, compress=True)


DEFROST = "The XR-7 defrost interval is chosen with jumper J4"


async def test_a_long_pdf_is_read_where_it_answers_the_question() -> None:
    """Over the page limit, the pages read are those that rank best for what the document is
    read for: the answer on page 240 of 300 is read, and the coverage says which pages."""
    async with DocumentExtractor(max_pages=50, timeout=30.0) as documents:
        document = await documents.extract(manual_pdf(), "pdf", "XR-7 defrost interval jumper")
    assert DEFROST in " ".join(document.text.split())
    assert 240 in document.pages and len(document.pages) == 50
    assert document.pages_read == 50 and document.pages_total == 300
    assert document.coverage is not None
    assert document.coverage.startswith("read pages ") and document.coverage.endswith(" of 300")
    assert "240" in document.coverage


def test_a_scan_cut_short_by_its_time_still_covers_the_whole_document() -> None:
    """refman.pdf (2,415 pages) on a loaded machine: the scan stopped at half its time after
    about 1,400 pages and read pages 21-1214, while the answers were on pages 1033-2352
    (bench/README.md). A scan cut short takes every 8th page first, then the next ones, so
    the pages that answer are found wherever they are; one that ends scans every page."""
    from core.documents.pdf import _relevant, scan_order

    class Texts:
        """A manual whose pages 1900-1909 answer the question; a page read costs 1 s."""

        def __init__(self) -> None:
            self.clock = 0.0

        def get(self, number: int) -> str:
            self.clock += 1.0
            if 1900 <= number < 1910:
                return "The XR-7 defrost interval is chosen with jumper J4."
            return "General notes on heat pump installation and the refrigerant lines."

    texts = Texts()
    wanted = _relevant(texts, 2400, 50, "XR-7 defrost jumper", 1200.0, lambda: texts.clock)
    assert wanted[:4] == [1904, 1905, 1906, 1907]  # the answering pages of the half scanned
    assert sorted(scan_order(20)) == list(range(20)) and list(scan_order(3)) == [0, 1, 2]


async def test_without_a_question_a_long_pdf_gives_its_first_pages() -> None:
    async with DocumentExtractor(max_pages=50, timeout=30.0) as documents:
        document = await documents.extract(manual_pdf(), "pdf")
        whole = await documents.extract(manual_pdf(40, 20), "pdf", "XR-7")
    assert DEFROST not in document.text
    assert document.coverage == "read pages 1-50 of 300"
    assert whole.coverage is None and DEFROST in " ".join(whole.text.split())  # every page


def test_page_ranges_are_compact() -> None:
    from core.documents.result import page_ranges

    assert page_ranges((1, 2, 3, 7, 9, 10, 240)) == "1-3, 7, 9-10, 240"


def test_a_pdf_read_in_part_is_noted_and_its_header_says_so(
    cli_env: dict[str, str],
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> None:
    """The note names the pages read, and the writer's source header says the same, so the
    report does not present part of a document as all of it."""
    search_server.fake.pdf_pages = 30
    env = {**cli_env, "FATHOM_PDF_MAX_PAGES": "10"}
    result = fathom("research", "heat pumps", "--depth", "1", "--json", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    notes = json.loads(result.stdout)["notes"]
    read_in_part = [note for note in notes if "read pages" in note]
    assert read_in_part and all(note.endswith(" of 30.") for note in read_in_part), notes
    (writer,) = llm_server.fake.requests_for("writer")
    prompt = writer.body["messages"][-1]["content"]
    assert re.search(r"^\[\d+\] .* \(read pages [\d, -]+ of 30\)$", prompt, re.MULTILINE), prompt


def test_a_chinese_run_notes_a_pdf_read_in_part_in_chinese(
    cli_env: dict[str, str],
    tmp_path: Path,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
) -> None:
    search_server.fake.pdf_pages = 30
    env = {**cli_env, "FATHOM_PDF_MAX_PAGES": "10"}
    result = fathom("research", "热泵的冬季表现", "--depth", "1", "--json", env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    notes = json.loads(result.stdout)["notes"]
    read_in_part = [note for note in notes if "读取了第 " in note]
    assert read_in_part and all(note.endswith("（共 30 页）。") for note in read_in_part), notes
    assert not any("read pages" in note for note in notes)


# --- HTML documentation pages -----------------------------------------------------------------

#: A page as Sphinx writes it: each heading ends in a "¶" permalink (sphinx/writers/html5.py,
#: ``add_permalink_ref``), a console block is a <pre> in a "highlight" div.
SPHINX = """<!DOCTYPE html><html><head><title>Installation &mdash; Foo 2.1 documentation</title>
</head><body><div class="document"><div class="body" role="main">
<section id="installation"><h1>Installation<a class="headerlink" href="#installation"
title="Permalink to this heading">¶</a></h1>
<p>Foo needs Python 3.11. Install it from PyPI with pip, then check the version it reports
before you configure anything else in the project.</p>
<div class="highlight-console notranslate"><div class="highlight"><pre><span></span><span
class="gp">$ </span>pip install foo
<span class="gp">$ </span>foo --version
foo 2.1.0
</pre></div></div>
<section id="configuration"><h2>Configuration<a class="headerlink" href="#configuration"
title="Link to this heading">¶</a></h2>
<p>The configuration file lives in your home directory and is read at start; every key has a
default that works for most installations of the tool.</p>
</section></section></div></div></body></html>"""

#: A page as rustdoc writes it: a "§" anchor before each heading
#: (src/librustdoc/html/markdown.rs, ``doc-anchor``), examples in <pre><code>.
RUSTDOC = """<html><head><title>Vec in std::vec - Rust</title></head><body><main>
<section id="main-content" class="content"><div class="docblock"><p>A contiguous growable array
type, written as <code>Vec&lt;T&gt;</code>, short for ‘vector’. It can hold any number of
elements and grows as needed.</p>
<h2 id="examples"><a class="doc-anchor" href="#examples">§</a>Examples</h2>
<div class="example-wrap"><pre class="rust rust-example-rendered"><code><span class="kw">let
</span><span class="kw-2">mut </span>vec = Vec::new();
vec.push(<span class="number">1</span>);
vec.push(<span class="number">2</span>);
<span class="macro">assert_eq!</span>(vec.len(), <span class="number">2</span>);</code></pre></div>
<p>The vec! macro is provided for convenient initialization of vectors with a list of
elements, like an array literal in other languages.</p></div></section></main></body></html>"""


def test_sphinx_pages_lose_their_pilcrows_and_keep_their_console_lines() -> None:
    content = read_page(SPHINX, "https://foo.readthedocs.io/en/latest/install.html", "text/html")
    assert "¶" not in content.text
    assert "Installation\n" in content.text and "Configuration\n" in content.text
    passages = [p.text for p in select(split_passages(content.text), "install foo pip", 600)]
    assert "```\n$ pip install foo\n$ foo --version\nfoo 2.1.0\n```" in passages


def test_rustdoc_pages_lose_their_section_signs_and_keep_their_code_lines() -> None:
    content = read_page(RUSTDOC, "https://doc.rust-lang.org/std/vec/struct.Vec.html", "text/html")
    assert "§" not in content.text and "\nExamples\n" in content.text
    passages = [p.text for p in select(split_passages(content.text), "vec push example", 600)]
    code = [p for p in passages if p.startswith("```")]
    assert code and "vec.push(1);\nvec.push(2);" in code[0]


def test_a_code_passage_is_quoted_line_by_line_for_the_writer() -> None:
    source = NumberedSource(
        n=1,
        title="Installation",
        url="https://foo.example/install",
        snippet="",
        topic="foo",
        passages=("```\n$ pip install foo\nfoo 2.1.0\n```",),
    )
    (block,) = writer_source_blocks([source])
    assert block.endswith("> ```\n    > $ pip install foo\n    > foo 2.1.0\n    > ```")


async def test_an_html_file_is_titled_by_its_title(extractor: DocumentExtractor) -> None:
    document = await extractor.extract(SPHINX.encode(), "html")
    assert document.title == "Installation — Foo 2.1 documentation"
    assert "¶" not in document.text
    file = AttachedFile(
        id="F1", name="install.html", kind="html", size=1, attached_by="Ana", title=document.title
    )
    assert (
        file_title(file) == "Installation — Foo 2.1 documentation (install.html, attached by Ana)"
    )
    untitled = file.model_copy(update={"title": None})
    assert file_title(untitled) == "install.html (attached by Ana)"


# --- legacy 8-bit fonts (issue 51, item 7) ------------------------------------------------------


def pdfium_text(pdf: bytes) -> str:
    """What PDFium itself returns for the first page (before Fathom's reading of it)."""
    import pypdfium2 as pdfium

    document = pdfium.PdfDocument(pdf)
    try:
        return str(document[0].get_textpage().get_text_range())
    finally:
        document.close()


async def test_cyrillic_in_a_cp1251_tex_font_is_read_as_russian(
    extractor: DocumentExtractor,
) -> None:
    """The Russian lshort (lshortru.pdf in Debian's texlive-lang-cyrillic, pdfTeX-0.14h) sets
    its Cyrillic in Type 3 bitmap fonts whose codes are CP1251 and whose glyphs are named
    /a192.../a255, with no ToUnicode: PDFium gives "Áëàãîäàðíîñòè" for "Благодарности"."""
    pdf = legacy_pdf([[line.encode("cp1251") for line in RUSSIAN]])
    assert "Áëàãîäàðíîñòè àâòîðàì" in pdfium_text(pdf)
    document = await extractor.extract(pdf, "pdf")
    assert document.text == "\n".join(RUSSIAN)


async def test_cyrillic_in_a_koi8_r_font_is_read_as_russian(extractor: DocumentExtractor) -> None:
    """The same font shape with KOI8-R codes (RFC 1489, the Cyrillic of Unix systems that
    legacy fonts were made for; issue 51 names it): every code is a Cyrillic letter in CP1251
    too, so only the letters' frequencies (charset-normalizer's) tell which it was."""
    pdf = legacy_pdf([[line.encode("koi8_r") for line in RUSSIAN]])
    assert "âÌÁÇÏÄÁÒÎÏÓÔÉ" in pdfium_text(pdf)
    document = await extractor.extract(pdf, "pdf")
    assert document.text == "\n".join(RUSSIAN)


async def test_thai_in_a_tis_620_tex_font_is_read_as_thai(extractor: DocumentExtractor) -> None:
    """The Thai lshort (lsh132.pdf in texlive-lang-other, pdfTeX-0.14f) sets Thai in TLWG's
    Norasi, a TrueType font with TIS-620 codes, glyphs named /ThaiCharacter..., no ToUnicode,
    and tone marks over upper vowels at 0x8B-0x8F: PDFium gives "ºÑ¡" for "บัก" and C1
    controls for the raised marks ("·Õ\\x8b" for "ที่")."""
    pdf = legacy_pdf([[tlwg(line) for line in THAI]], truetype=True)
    raw = pdfium_text(pdf)
    assert "¼Å¡ÒÃ·´ÅÍ§" in raw and "·Õ\x8b" in raw
    document = await extractor.extract(pdf, "pdf")
    assert document.text == "\n".join(THAI)


LATIN_1 = {
    "French": "Les pompes à chaleur ont fonctionné tout l'hiver ; élèves et maîtres "
    "d'ouvrage ont noté une efficacité étonnante même à moins vingt degrés.",
    "German": "Die Wärmepumpen liefen den ganzen Winter über; Prüfer und Hausbesitzer "
    "bestätigten höhere Effizienz, außer während der Abtauzyklen bei Frost.",
    "Spanish": "Las bombas de calor funcionaron todo el invierno en Logroño; los técnicos "
    "señalaron una eficiencia notable aun con temperaturas bajo cero.",
    "Portuguese": "As bombas de calor funcionaram durante todo o inverno; os técnicos "
    "notaram eficiência acima do esperado, até em noites de geada intensa.",
    "Icelandic": "Varmadælurnar gengu allan veturinn á Íslandi; þjónustuaðilar og "
    "húseigendur sögðu að þær hefðu staðið sig vel í frosti og roki.",
}


@pytest.mark.parametrize("language", list(LATIN_1))
async def test_latin_1_text_in_a_legacy_font_stays_as_it_is(
    extractor: DocumentExtractor, language: str
) -> None:
    """A Latin-1 page in the same font shape (texlive-lang-french, -german, -spanish,
    -portuguese and -european in Debian write such pages, their fonts' codes Latin-1) is
    words of the Latin script already: it is never "decoded" into Cyrillic."""
    text = LATIN_1[language]
    lines = wrap(text, 60)
    pdf = legacy_pdf([[line.encode("latin-1") for line in lines]])
    document = await extractor.extract(pdf, "pdf")
    assert document.text == "\n".join(lines)


async def test_a_legacy_font_no_encoding_makes_words_of_is_skipped(
    extractor: DocumentExtractor,
) -> None:
    """Armenian set by ArmTeX in an ArmSCII-8 font (armscii8.def in texlive-lang-european:
    code 178 is Ayb): no legacy encoding tried gives words of one script (ISO-8859-5 gives
    Cyrillic letters, "аГлГыяГнЧ", cased as no word is), so the page is no source."""
    armenian = "Հայաստանի Հանրապետության Սահմանադրությունը ընդունվել է հանրաքվեով"

    def armscii_8(text: str) -> bytes:
        out = bytearray()
        for char in text:
            if "Ա" <= char <= "Ֆ":
                out.append(0xB2 + 2 * (ord(char) - ord("Ա")))
            elif "ա" <= char <= "ֆ":
                out.append(0xB3 + 2 * (ord(char) - ord("ա")))
            else:
                out += char.encode("ascii")
        return bytes(out)

    pdf = legacy_pdf([[armscii_8(armenian)] * 4])
    with pytest.raises(DocumentUnreadable) as unreadable:
        await extractor.extract(pdf, "pdf")
    assert str(unreadable.value.reason) == "its text could not be decoded"


@pytest.mark.parametrize(
    ("lines", "encode", "truetype", "query"),
    [
        (RUSSIAN, lambda line: line.encode("cp1251"), False, "сезонный коэффициент компрессор"),
        (THAI, tlwg, True, "คอมเพรสเซอร์ ช่างติดตั้ง"),
    ],
    ids=["russian", "thai"],
)
async def test_a_long_legacy_pdf_is_read_where_it_answers_the_question(
    lines: list[str], encode: Any, truetype: bool, query: str
) -> None:
    """Pages are ranked on their decoded words: a Russian (Thai) question finds page 45 of 60
    of a manual in a legacy font, whose other pages are about something else."""
    filler = lines[:2]
    pages = [[encode(line) for line in filler] for _ in range(60)]
    pages[44] = [encode(line) for line in lines]
    async with DocumentExtractor(max_pages=5, timeout=30.0) as documents:
        document = await documents.extract(legacy_pdf(pages, truetype=truetype), "pdf", query)
    assert 45 in document.pages and len(document.pages) == 5
    assert lines[3] in document.text


# --- TeX's accents and running lines with page numbers (issue 51, item 7) ----------------------


async def test_accents_set_apart_from_their_letters_are_joined(
    extractor: DocumentExtractor,
) -> None:
    """TeX's OT1 fonts have no accented letters: "Universität" is set as a diaeresis, a kern
    back and an "a" (PDFium: "Universit¨at"); producers that set the accent after its letter
    give "Universita¨t" and "e´te´" (the shapes issue 51 quotes from pdftotext and PDFium)."""
    pdf = shown_pdf(
        [
            [
                b"[(Universit\250) 333 (at Hamburg, Vogt-K\250) 333 (olln-Stra\337e 30)] TJ",
                b"[(Universita) 389 (\250) -56 (t Hamburg)] TJ",
                b"[(Un e) 389 (\264) -56 (te) 389 (\264) -56 ( chaud \340 Caf\351.)] TJ",
            ]
        ]
    )
    assert pdfium_text(pdf).splitlines()[:2] == [
        "Universit¨at Hamburg, Vogt-K¨olln-Straße 30",
        "Universita¨t Hamburg",
    ]
    document = await extractor.extract(pdf, "pdf")
    assert document.text.splitlines() == [
        "Universität Hamburg, Vogt-Kölln-Straße 30",
        "Universität Hamburg",
        "Un été chaud à Café.",
    ]


@pytest.mark.parametrize(
    ("pdfium", "read"),
    [
        ("k¨onnen erg¨anzt", "können ergänzt"),  # gerdoc.pdf (texlive-lang-german)
        ("r´ef´erence du syst`eme `a", "référence du système à"),  # latex2e-fr.pdf (-french)
        ("Gu´ıa de instalaci´on, ´Indice", "Guía de instalación, Índice"),  # texlive-es.pdf
        ("Introdu¸c˜ao, apresenta¸c˜oes", "Introdução, apresentações"),  # xypic-tutorial.pdf
        ("franc¸aise", "française"),  # visualFAQ-fr.pdf: the cedilla after its letter
        ("nyelv˝u, DEZSO˝", "nyelvű, DEZSŐ"),  # huhyphn.pdf (texlive-lang-european)
        ("Imi˛e, umiej˛etnosci", "Imię, umiejętnosci"),  # cv_template_pl.pdf (-polish)
        ("Priekšv¯ards", "Priekšvārds"),  # latvian.pdf (texlive-lang-european)
        ("Thê´ Giới", "Thế Giới"),  # texlive-es.pdf: a Vietnamese name
        ("e´te´ Universita¨t", "été Universität"),  # after their letters (issue 51)
        ("`ls -l` and ``quoted''", "`ls -l` and ``quoted''"),  # backquotes of code stay
        ("don´t, it´s", "don´t, it´s"),  # an acute typed for an apostrophe stays
        ("f´(x) = 2x¯", "f´(x) = 2x¯"),  # no letter takes these
    ],
)
def test_accents_as_real_pdfs_give_them(pdfium: str, read: str) -> None:
    """Text as PDFium gives it from Debian's texlive-lang-* documentation (each case names its
    file)."""
    assert joined_accents(pdfium) == read


async def test_a_running_header_with_a_page_number_is_dropped_on_either_side(
    extractor: DocumentExtractor,
) -> None:
    """gnuplot.pdf (Debian's gnuplot-doc 5.4.4), as PDFium reads it: odd pages begin
    "gnuplot 5.4 41", even ones "42 gnuplot 5.4", so neither form is on half the pages; read
    for a question, four such pages kept the header in every passage."""
    topics = ["Valid", "Unary operators", "Binary operators", "Summation", "Gnuplot variables"]
    pages = [
        [
            f"gnuplot 5.4 {n}" if n % 2 else f"{n} gnuplot 5.4",
            f"{topic}: how gnuplot evaluates an expression of this kind.",
            "The result may be used in a plot command or assigned to a variable.",
        ]
        for n, topic in enumerate(topics, 41)
    ]
    document = await extractor.extract(make_pdf(pages), "pdf")
    assert "gnuplot 5.4" not in document.text
    assert document.text.count("how gnuplot evaluates an expression") == 5
    assert without_running_lines(["41 gnuplot 5.4\nA.", "gnuplot 5.4 42\nB."]) == [
        "41 gnuplot 5.4\nA.",
        "gnuplot 5.4 42\nB.",
    ]  # (two pages are not enough to call a line running)
