"""Documents: PDFs (hand-written, real files: tests/pdfs.py) and DOCX files read by the
worker processes of core.documents within their limits, pathological files included; HTML and
text; which kind a file is; PDF result pages fetched, read and ranked by the page reader."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import ssl
import tracemalloc
import zipfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from core.documents import DocumentExtractor, DocumentText, DocumentUnreadable, document_kind
from core.documents import result as reasons
from core.documents.decode import decode_text
from core.documents.matter import without_matter
from core.documents.result import checked_date, plausible_date
from core.pages.fetch import PageFetcher, PageSkipped
from core.pages.reader import PageReader
from tests.chat_app import wait_for
from tests.fakes.server import BackgroundServer
from tests.pdfs import (
    REPORT_FACTS,
    REPORT_MATTER,
    bomb_pdf,
    deep_tree_pdf,
    encrypted_pdf,
    image_only_pdf,
    make_docx,
    make_pdf,
    many_pages_pdf,
    report_pdf,
)

QUERY = "heat pumps cold climates heat pump performance in winter"
DOCX_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


@pytest.fixture
async def extractor() -> AsyncIterator[DocumentExtractor]:
    async with DocumentExtractor(timeout=30.0) as documents:
        yield documents


#: Room for :func:`slow_pdf`: PDFium's text of its one page peaks at about 650 MB, over a
#: worker's default 512 MB, so on a fast machine it ran out of memory before the time
#: limit the tests that use it are about.
SLOW_PDF_MEMORY = 2 * 1024**3


def slow_pdf(operators: int = 300_000) -> bytes:
    """One page whose content stream shows ``operators`` strings: about two seconds of
    PDFium's time (and :data:`SLOW_PDF_MEMORY`)."""
    return make_pdf([["heat pumps"] * operators], compress=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie, not yet reaped, counts)."""
    return Path(f"/proc/{pid}").exists()


def _peak_memory(pid: int) -> int:
    """A process's peak address space (VmPeak), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmPeak:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmPeak")


# --- PDFs ---------------------------------------------------------------------------------


async def test_a_pdf_is_read_up_to_its_page_limit_with_its_metadata() -> None:
    pages = [[f"Page {n} says heat pumps work.", f"Line two of page {n}."] for n in range(1, 6)]
    pdf = make_pdf(pages, title="Heat  pumps\nreport", created="D:20240315093000+01'00'")
    async with DocumentExtractor(max_pages=3) as documents:
        document = await documents.extract(pdf, "pdf")
        compressed = await documents.extract(make_pdf(pages, compress=True), "pdf")
    assert (document.kind, document.pages_read, document.pages_total) == ("pdf", 3, 5)
    assert "Page 3 says heat pumps work." in document.text and "Page 4" not in document.text
    assert (document.title, document.published) == ("Heat pumps report", "2024-03-15")
    assert compressed.text == document.text and compressed.title is None
    assert compressed.published is None


@pytest.mark.parametrize(
    ("created", "published"),
    [
        ("D:20240315", "2024-03-15"),
        ("20231201120000Z", "2023-12-01"),
        ("D:19000101000000", None),  # before 1980: a default, not a date
        ("D:20991231000000", None),  # in the future
        ("D:20241341000000", None),  # no such month
        ("D:2024", None),  # a year alone is not a day
        ("yesterday", None),
    ],
)
async def test_a_pdfs_creation_date_is_kept_only_when_plausible(
    extractor: DocumentExtractor, created: str, published: str | None
) -> None:
    document = await extractor.extract(make_pdf([["Dated."]], created=created), "pdf")
    assert document.published == published


def test_dates_are_checked_as_dates() -> None:
    assert plausible_date(2024, 2, 29) == "2024-02-29"
    assert plausible_date(2023, 2, 29) is None
    assert checked_date("2024-02-29") == "2024-02-29"
    for bad in ("2024-2-29", "1970-01-01", 20240229, None, "2024-02-29T00:00"):
        assert checked_date(bad) is None


async def test_an_encrypted_pdf_is_read_only_without_a_password(
    extractor: DocumentExtractor,
) -> None:
    pdf = make_pdf([["Heat pumps, in confidence."]])
    opened = await extractor.extract(encrypted_pdf(pdf, ""), "pdf")  # an empty user password
    assert opened.text == "Heat pumps, in confidence."
    with pytest.raises(DocumentUnreadable) as locked:
        await extractor.extract(encrypted_pdf(pdf, "s3cret"), "pdf")
    assert str(locked.value.reason) == "it is password-protected"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (image_only_pdf(), "it has no text layer (scanned images?)"),
        (b"%PDF-1.7\nnot really a PDF at all", "it is damaged"),
        (b"", "it is damaged"),
        (make_pdf([["x"]])[:40], "it is damaged"),  # cut in its first object
    ],
)
async def test_a_pdf_without_text_is_unreadable_with_its_reason(
    extractor: DocumentExtractor, data: bytes, reason: str
) -> None:
    with pytest.raises(DocumentUnreadable) as unreadable:
        await extractor.extract(data, "pdf")
    assert str(unreadable.value.reason) == reason


async def test_a_pdf_cut_short_gives_its_first_pages(extractor: DocumentExtractor) -> None:
    pdf = make_pdf([[f"Page {n}: heat pumps in winter."] * 30 for n in range(1, 11)])
    document = await extractor.extract(pdf[: len(pdf) // 2], "pdf")
    assert "Page 1: heat pumps in winter." in document.text
    assert "Page 10" not in document.text
    assert document.pages_read is not None and 1 <= document.pages_read < 10
    # Its catalog written last, a PDF cut anywhere has none: nothing can be read.
    late = make_pdf([["Heat pumps."]] * 10, catalog_last=True)
    with pytest.raises(DocumentUnreadable) as unreadable:
        await extractor.extract(late[: len(late) // 2], "pdf")
    assert str(unreadable.value.reason) == "it is damaged"


async def test_a_decompression_bomb_is_contained(extractor: DocumentExtractor) -> None:
    """A content stream inflating to 4 GiB (a 4 MB file): the worker's address space ends
    it; the main process's memory does not move."""
    bomb = bomb_pdf(4 << 30)
    assert len(bomb) < 8 << 20
    tracemalloc.start()
    try:
        with pytest.raises(DocumentUnreadable) as unreadable:
            await extractor.extract(bomb, "pdf")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert unreadable.value.reason == reasons.TOO_MUCH_MEMORY
    assert peak < 32 << 20, f"main process peak {peak / 1e6:.0f} MB"
    # The worker is still there for the next file.
    assert (await extractor.extract(make_pdf([["After."]]), "pdf")).text == "After."


async def test_the_workers_memory_limit_holds_just_above_what_it_needs() -> None:
    """With the worker's address space barely above what it needs to start, the bomb's 32 MB
    stream cannot be allocated: the file is unreadable, the worker is replaced."""
    async with DocumentExtractor() as probe:
        await probe.extract(make_pdf([["Probe."]]), "pdf")
        needed = _peak_memory(probe.pids[0])
    async with DocumentExtractor(memory_limit=needed + (24 << 20)) as documents:
        with pytest.raises(DocumentUnreadable) as unreadable:
            await documents.extract(bomb_pdf(1 << 30), "pdf")
        assert str(unreadable.value.reason) == "reading it needed too much memory"
        assert (await documents.extract(make_pdf([["Next."]]), "pdf")).text == "Next."
        assert documents.started == 2


async def test_a_pdf_of_5000_pages_is_read_up_to_the_page_limit(
    extractor: DocumentExtractor,
) -> None:
    document = await extractor.extract(many_pages_pdf(5000), "pdf")
    assert (document.pages_read, document.pages_total) == (50, 5000)
    assert "Page 50 of 5000" in document.text and "Page 51 of" not in document.text


async def test_a_page_tree_5000_levels_deep_is_read_up_to_the_page_limit(
    extractor: DocumentExtractor,
) -> None:
    """PDFium walks a page tree without recursing: 5000 levels are 5000 pages, read like any
    (its worker's limits still hold for what it cannot walk)."""
    document = await extractor.extract(deep_tree_pdf(5000), "pdf")
    assert (document.pages_read, document.pages_total) == (50, 5000)
    assert document.text.startswith("Deep.")


async def test_a_slow_pdf_gives_the_pages_read_in_time() -> None:
    """Past three quarters of its time limit the worker stops reading pages and answers with
    those it has (5000 pages would take minutes)."""
    async with DocumentExtractor(max_pages=5000, timeout=4.0) as documents:
        document = await documents.extract(many_pages_pdf(5000), "pdf")
        assert document.pages_read is not None and 0 < document.pages_read < 5000
        assert documents.started == 1


async def test_a_pdf_past_the_time_limit_kills_its_worker_and_the_next_gets_a_new_one() -> None:
    async with DocumentExtractor(timeout=1.0, memory_limit=SLOW_PDF_MEMORY) as documents:
        await documents.extract(make_pdf([["Warm-up."]]), "pdf")  # start-up is not timed
        (first,) = documents.pids
        with pytest.raises(DocumentUnreadable) as unreadable:
            await documents.extract(slow_pdf(), "pdf")  # one page of several seconds
        assert str(unreadable.value.reason) == "its text took too long to extract"
        assert first not in documents.pids
        assert (await documents.extract(make_pdf([["Next."]]), "pdf")).text == "Next."
        assert documents.started == 2 and documents.pids != [first]
    assert not _alive(first)


async def test_a_worker_killed_mid_file_costs_that_file_only() -> None:
    async with DocumentExtractor(timeout=30.0, memory_limit=SLOW_PDF_MEMORY) as extractor:
        await _killed_mid_file(extractor)


async def _killed_mid_file(extractor: DocumentExtractor) -> None:
    reading = asyncio.create_task(extractor.extract(slow_pdf(), "pdf"))
    (pid,) = await wait_for(lambda: extractor.pids)
    await asyncio.sleep(0.5)  # started, or about to: either way it dies with the file
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(DocumentUnreadable) as unreadable:
        await reading
    assert str(unreadable.value.reason) == "its reader stopped unexpectedly"
    assert (await extractor.extract(make_pdf([["Next."]]), "pdf")).text == "Next."
    assert extractor.started == 2 and pid not in extractor.pids
    assert not _alive(pid)


async def test_workers_are_kept_between_files_and_bounded_in_number() -> None:
    files = [make_pdf([[f"File {n}."]]) for n in range(6)]
    async with DocumentExtractor(workers=2) as documents:
        read = await asyncio.gather(*(documents.extract(f, "pdf") for f in files))
        assert [d.text for d in read] == [f"File {n}." for n in range(6)]
        assert documents.started == 2 and len(documents.pids) == 2


async def test_warming_starts_the_workers_once_and_files_meanwhile_wait_for_them() -> None:
    """``warm`` starts the workers ahead of the first file; files that come while they start
    wait for them instead of starting more; closing while they start leaves none behind."""
    files = [make_pdf([[f"File {n}."]]) for n in range(3)]
    async with DocumentExtractor(workers=2) as documents:
        documents.warm()
        documents.warm()  # (the workers already starting count)
        read = await asyncio.gather(*(documents.extract(f, "pdf") for f in files))
        assert [d.text for d in read] == [f"File {n}." for n in range(3)]
        assert documents.started == 2 and len(documents.pids) == 2
        documents.warm()  # both running: nothing to start
        assert documents.started == 2
    starting = DocumentExtractor(workers=2)
    starting.warm()
    pids = await wait_for(lambda: starting.pids if len(starting.pids) == 2 else None)
    await starting.aclose()
    assert starting.pids == [] and not any(_alive(pid) for pid in pids)
    starting.warm()  # closed: nothing starts
    assert starting.started == 2


async def test_closing_leaves_no_worker_process() -> None:
    documents = DocumentExtractor(workers=2, memory_limit=SLOW_PDF_MEMORY)
    await asyncio.gather(*(documents.extract(make_pdf([["x"]]), "pdf") for _ in range(2)))
    busy = asyncio.create_task(documents.extract(slow_pdf(), "pdf"))
    await asyncio.sleep(0.3)  # its request sent: a worker is reading it
    pids = documents.pids
    assert len(pids) == 2
    await documents.aclose()
    assert documents.pids == [] and not any(_alive(pid) for pid in pids)
    with pytest.raises(DocumentUnreadable):  # the file being read when it closed
        await busy
    with pytest.raises(RuntimeError):
        await documents.extract(make_pdf([["x"]]), "pdf")
    # close() alone (what PageReader.close does) kills them too; the loop reaps them.
    other = DocumentExtractor()
    await other.extract(make_pdf([["x"]]), "pdf")
    (pid,) = other.pids
    other.close()
    await wait_for(lambda: not _alive(pid))


async def test_a_pdfs_cover_contents_and_references_are_left_out(
    extractor: DocumentExtractor,
) -> None:
    document = await extractor.extract(report_pdf(), "pdf")
    assert (document.pages_read, document.pages_total) == (6, 6)
    for fact in REPORT_FACTS:
        assert fact in " ".join(document.text.split())
    for matter in REPORT_MATTER:
        assert matter not in document.text
    assert (document.title, document.published) == ("Heat pumps in cold climates", "2026-01-15")


def test_front_and_back_matter_rules() -> None:
    body = " ".join(["Heat pumps move heat from outside air into a house."] * 8)
    pages = [
        "A Title\nAn Author",
        "Table of Contents\n1 Intro .......... 3\n2 More .......... 9",
        f"{body}\n3 Results . . . . . 12",
        f"{body}\nReferences\n[1] A. Author (2020). A title.",
        "[2] B. Author et al. (2021). Another.\n[3] doi:10.1000/182",
        f"Appendix\n{body}",
    ]
    kept = without_matter(pages)
    assert kept == ["", "", body, body, "", f"Appendix\n{body}"]
    assert without_matter(["Short page one.", "Short page two."]) == [
        "Short page one.",
        "Short page two.",
    ]  # no long page: the first is not taken for a cover
    assert without_matter(["Contents\n1 A .......... 2"]) == ["Contents\n1 A .......... 2"]


# --- DOCX ---------------------------------------------------------------------------------


async def test_a_docx_gives_its_paragraphs_and_tables_in_order(
    extractor: DocumentExtractor,
) -> None:
    document = await extractor.extract(make_docx(title="Winter report"), "docx")
    assert document.text == (
        "Heat pumps in winter\n\nHeat pumps keep working at minus 20 C.\n\n"
        "Model | COP\nA-1 | 3.1\n\nThe end."
    )
    assert (document.kind, document.pages_read, document.pages_total) == ("docx", None, None)
    assert (document.title, document.published) == ("Winter report", "2025-06-01")
    untitled = await extractor.extract(make_docx(year=1970), "docx")
    assert (untitled.title, untitled.published) == (None, None)


def _zip(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def _zip_bomb_docx(size: int) -> bytes:
    """A DOCX whose document.xml unpacks to ``size`` bytes of spaces."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("word/document.xml", "w", force_zip64=True) as member:
            block = b" " * (1 << 20)
            for _ in range(size >> 20):
                member.write(block)
    return out.getvalue()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (_zip({"word/document.xml": b"<not xml"}), "it is damaged"),
        (b"PK\x03\x04 cut short", "it is damaged"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 512, "it is password-protected"),
        (_zip_bomb_docx(210 << 20), "reading it needed too much memory"),
    ],
)
async def test_a_docx_that_cannot_be_read_says_why(
    extractor: DocumentExtractor, data: bytes, reason: str
) -> None:
    with pytest.raises(DocumentUnreadable) as unreadable:
        await extractor.extract(data, "docx")
    assert str(unreadable.value.reason) == reason


# --- HTML and text ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (b"plain \xe2\x80\x94 UTF-8", "plain — UTF-8"),
        (b"\xef\xbb\xbfwith a BOM", "with a BOM"),
        ("UTF-16 with a BOM".encode("utf-16"), "UTF-16 with a BOM"),
        ("UTF-16 big-endian".encode("utf-16-be"), "UTF-16 big-endian"),
        ("UTF-16 little-endian, no BOM".encode("utf-16-le"), "UTF-16 little-endian, no BOM"),
        # not UTF-8: the encoding charset-normalizer finds (tests/test_attachments.py has a
        # file in each legacy encoding); one byte tells CP1252 from CP1250 no better
        (b"caf\xe9 latin-1", "caf\xe9 latin-1"),
        ("Señor Muñoz, año".encode("cp1252"), "Señor Muñoz, año"),
    ],
)
def test_text_is_decoded_by_its_bom_else_utf8_else_utf16(data: bytes, text: str) -> None:
    assert decode_text(data) == text


async def test_html_and_text_are_read_in_process(extractor: DocumentExtractor) -> None:
    html = (
        b"<html><body><nav>Home | About</nav><article><h1>Heat pumps</h1><p>Heat pumps move "
        b"heat from the outside air into a house, three units of heat per unit of "
        b"electricity.</p></article><footer>All rights reserved.</footer></body></html>"
    )
    page = await extractor.extract(html, "html")
    assert "three units of heat" in page.text and "All rights reserved" not in page.text
    assert page == DocumentText(text=page.text, kind="html")
    text = await extractor.extract("# Notes\n\nHeat pumps.\x00".encode("utf-16"), "text")
    assert text == DocumentText(text="# Notes\n\nHeat pumps.", kind="text")
    assert extractor.started == 0  # no worker process for these
    for empty, kind in ((b"  \n", "text"), (b"<html><body></body></html>", "html")):
        with pytest.raises(DocumentUnreadable) as unreadable:
            await extractor.extract(empty, kind)
        assert str(unreadable.value.reason) == "no readable text"
    with pytest.raises(DocumentUnreadable) as unsupported:
        await extractor.extract(b"x", "xlsx")
    assert str(unsupported.value.reason) == "not a supported document type"


# --- which kind ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content_type", "head", "kind"),
    [
        ("report.bin", "application/octet-stream", b"%PDF-1.7\n...", "pdf"),
        (None, None, b"\r\njunk first\r\n%PDF-1.4", "pdf"),  # PDF allows junk before
        ("file.txt", "text/plain", b"%PDF-1.5", "pdf"),  # the bytes win
        ("notes.docx", DOCX_TYPE, make_docx(), "docx"),
        ("archive", "application/zip", make_docx(), "docx"),  # by what it holds
        ("data.docx", DOCX_TYPE, _zip({"xl/workbook.xml": b"<x/>"}), None),  # an xlsx
        ("cut.docx", None, b"PK\x03\x04\x14\x00", "docx"),  # cut short: its name decides
        ("x.pdf", "application/pdf", b"not yet known", "pdf"),
        ("x", "application/x-pdf", b"", "pdf"),
        ("x", "Text/HTML; charset=utf-8", b"<html>", "html"),
        ("x", "application/xhtml+xml", b"<html>", "html"),
        ("x", "text/markdown", b"# Title", "text"),
        ("x", "text/x-markdown", b"# Title", "text"),
        ("x", "text/plain", b"hello", "text"),
        ("readme.md", None, b"# Title", "text"),
        ("README.MARKDOWN", "", b"# Title", "text"),
        ("page.HTM", None, b"<p>", "html"),
        ("page.html?x=1", None, b"<p>", "html"),
        ("notes.txt", "application/octet-stream", b"hello", "text"),
        ("photo.png", "image/png", b"\x89PNG\r\n", None),
        ("photo.txt", "text/plain", b"\x89PNG\r\n", None),  # a PNG called text
        ("sheet.xlsx", None, b"", None),
        (None, None, b"hello", None),
        (None, "application/json", b"{}", None),
    ],
)
def test_document_kind(name: str | None, content_type: str | None, head: bytes, kind: str) -> None:
    assert document_kind(name, content_type, head) == kind


# --- PDF result pages ---------------------------------------------------------------------


def build_site() -> Starlette:
    report = report_pdf()

    def pdf(media_type: str) -> Response:
        return Response(report, media_type=media_type)

    return Starlette(
        routes=[
            Route("/report.pdf", lambda r: pdf("application/pdf")),
            Route("/download/report.PDF", lambda r: pdf("application/octet-stream")),
            Route("/x-pdf", lambda r: pdf("application/x-pdf")),
            Route("/download/report", lambda r: pdf("application/octet-stream")),
            Route("/go", lambda r: RedirectResponse("/files/latest.pdf", 302)),
            Route("/files/latest.pdf", lambda r: pdf("binary/octet-stream")),
            Route(
                "/locked.pdf",
                lambda r: Response(encrypted_pdf(report, "pw"), media_type="application/pdf"),
            ),
            Route("/bomb.pdf", lambda r: Response(bomb_pdf(1 << 30), media_type="application/pdf")),
        ]
    )


@pytest.fixture
def site() -> Iterator[BackgroundServer]:
    with BackgroundServer(build_site()) as server:
        yield server


async def test_pdfs_are_fetched_as_bytes(site: BackgroundServer) -> None:
    async with httpx.AsyncClient(trust_env=False) as http:
        fetcher = PageFetcher(http, timeout=5.0, allow_loopback=True)
        for path in ("/report.pdf", "/download/report.PDF", "/x-pdf", "/go"):
            page = await fetcher.fetch(f"{site.url}{path}")
            assert page.is_pdf and page.data == report_pdf(), path
            assert (page.content_type, page.body, page.truncated) == ("application/pdf", "", False)
        assert (await fetcher.fetch(f"{site.url}/go")).final_url == f"{site.url}/files/latest.pdf"
        with pytest.raises(PageSkipped) as skipped:  # a binary type, and no .pdf in the path
            await fetcher.fetch(f"{site.url}/download/report")
        assert str(skipped.value.reason) == "not a text page (application/octet-stream)"
        small = PageFetcher(http, timeout=5.0, max_bytes=4096, allow_loopback=True)
        cut = await small.fetch(f"{site.url}/report.pdf")
        assert cut.truncated and cut.data == report_pdf()[:4096]


async def test_a_pdf_result_is_read_and_ranked_like_a_page(site: BackgroundServer) -> None:
    """The report's body passages take the budget; its cover, contents and references, which
    repeat the query's words (BM25 alone ranks two references above two body passages), do
    not. Unreadable PDFs are skipped with their reasons."""
    async with httpx.AsyncClient(trust_env=False) as http:
        fetcher = PageFetcher(http, timeout=10.0, allow_loopback=True)
        reader = PageReader(fetcher, pages=3, budget_tokens=600, documents=DocumentExtractor())
        try:
            urls = [f"{site.url}/report.pdf", f"{site.url}/locked.pdf", f"{site.url}/bomb.pdf"]
            reading = await reader.read(urls, QUERY)
        finally:
            await reader.aclose()
    (page,) = reading.pages
    text = " ".join(page.passages)
    assert sum(fact in text for fact in REPORT_FACTS) >= 2
    for matter in (*REPORT_MATTER, "Contents", "Energy Journal"):
        assert matter not in text
    assert [str(s.reason) for s in reading.skipped] == [
        "it is password-protected",
        "reading it needed too much memory",  # the bomb, in the worker's address space
    ]
    assert reading.read == 1 and reading.tokens <= 600


async def test_a_pdf_cut_at_the_size_limit_is_read_or_skipped_for_its_size() -> None:
    pages = [[f"Page {n}: heat pumps in cold climates work well."] * 20 for n in range(1, 30)]
    early, late = make_pdf(pages), make_pdf(pages, catalog_last=True)
    app = Starlette(
        routes=[
            Route("/early.pdf", lambda r: Response(early, media_type="application/pdf")),
            Route("/late.pdf", lambda r: Response(late, media_type="application/pdf")),
        ]
    )
    with BackgroundServer(app) as server:
        async with httpx.AsyncClient(trust_env=False) as http:
            fetcher = PageFetcher(http, timeout=10.0, max_bytes=16 * 1024, allow_loopback=True)
            reader = PageReader(fetcher, pages=2, documents=DocumentExtractor())
            try:
                reading = await reader.read(
                    [f"{server.url}/early.pdf", f"{server.url}/late.pdf"], "heat pumps"
                )
            finally:
                await reader.aclose()
    assert len(early) > 16 * 1024 and [p.url for p in reading.pages] == [f"{server.url}/early.pdf"]
    assert "Page 1: heat pumps" in reading.pages[0].passages[0]
    assert [str(s.reason) for s in reading.skipped] == ["it is larger than the 16 kB limit"]


async def test_the_pdf_settings_reach_the_readers_extractor() -> None:
    from core.runtime import page_client, page_reader
    from core.settings import load_settings

    settings = load_settings(_env_file=None, FATHOM_PDF_MAX_PAGES="7", FATHOM_PDF_TIMEOUT="3")
    assert (settings.pdf_max_pages, settings.pdf_timeout) == (7, 3.0)
    defaults = load_settings(_env_file=None)
    assert (defaults.pdf_max_pages, defaults.pdf_timeout) == (50, 10.0)
    for bad in ({"FATHOM_PDF_MAX_PAGES": "0"}, {"FATHOM_PDF_TIMEOUT": "0"}):
        with pytest.raises(Exception) as error:
            load_settings(_env_file=None, **bad)
        assert next(iter(bad)) in str(error.value)
    async with page_client(settings, ssl.create_default_context()) as http:
        reader = page_reader(settings, http, cache=None)  # type: ignore[arg-type]
        assert reader is not None
        assert (reader.documents.max_pages, reader.documents.timeout) == (7, 3.0)
        await reader.aclose()
