"""Reading PDFs within limits (``core.documents``): time and memory for normal and hostile files.

    python -m bench.pdf            # every case, about a minute
    python -m bench.pdf --case bomb

Each case runs in a fresh process of its own (the "bot"), which builds its file, then reads it
with a ``DocumentExtractor`` at the default limits (50 pages, 10 s, 512 MB per worker) unless
the case says otherwise. Reported per case: the wall time of the first extraction (it starts
the worker: Python and pypdfium2's imports) and of a second one of the same file (a worker kept
warm), what came out, the bot process's peak RSS (VmHWM) once the file is built and after
reading it, and the workers' peak RSS (``ru_maxrss`` of its reaped children). Cases:

- ``normal-300``: a 300-page report (2,800 characters of text and a 30 kB image per page,
  about 10 MB): the default 50 pages, read without a query (its first 50 pages);
  ``query-300``: the same read for a query, as a search result is (every page's text ranked,
  the best 50 read); ``all-300``: every page (text cap lifted);
- ``bomb``: one page whose content stream inflates to 4 GiB (a 4 MB file);
- ``pages-5000``: 5,000 pages; ``tree-5000``: a page tree 5,000 levels deep;
- ``slow-page``: one page of 400,000 text operators (pypdf took about half a minute on it and
  its worker was killed at the time limit; PDFium's text page for it outgrows the worker's
  memory limit in about 1.5 s);
- ``round``: one round of page reading (``PageReader``, 3 pages at once, like a run) whose
  three results are the bomb, the 5,000 pages and the deep tree, served on 127.0.0.1 with
  ``FATHOM_PAGE_MAX_BYTES`` at 8 MB: the round's wall time and the bot's peak;
- ``scan-gnuplot``, ``scan-refman``: the relevance scan of a real long manual (gnuplot.pdf,
  311 pages, from Debian's gnuplot-doc; refman.pdf, R's reference, 2,415 pages, from
  r-doc-pdf; fetched once with ``apt-get download`` into ``REAL_PDFS``): a warm worker reads
  its first 50 pages, then the best 50 for a question (the time limit raised to 60 s, so
  that every page is scanned), "first" and "second" being those two; the pages found are
  asserted to be those a plain BM25 over every page's text finds, and those found at the
  default 10 s limit are shown.

The issue's goal: a bomb, 5,000 pages or a 5,000-level tree leaves the run finishing within
40 s and the process under 450 MB peak. Results go to ``bench/results/pdf.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from bench.common import cpu_model
from core.documents.result import page_ranges

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "pdf.json"
CASES = (
    "normal-300",
    "query-300",
    "all-300",
    "bomb",
    "pages-5000",
    "tree-5000",
    "slow-page",
    "round",
    "scan-gnuplot",
    "scan-refman",
)
#: Where the real manuals are kept between runs (``apt-get download``, ``dpkg-deb -x``).
REAL_PDFS = Path(os.environ.get("FATHOM_BENCH_PDFS", "/tmp/fathom-bench-pdfs"))
#: case -> (Debian package, the PDF's path in it, the question it is read for)
MANUALS = {
    "scan-gnuplot": (
        "gnuplot-doc",
        "usr/share/doc/gnuplot/gnuplot.pdf",
        "splot pm3d colour palette surface",
    ),
    "scan-refman": (
        "r-doc-pdf",
        "usr/share/R/doc/manual/refman.pdf",
        "linear regression model formula residuals",
    ),
}
GOAL_SECONDS, GOAL_MB = 40.0, 450.0
WORDS = (
    "heat pump grid energy efficiency winter compressor refrigerant installation cost subsidy "
    "policy demand supply household measured season region meter report results"
).split()


def realistic_pdf(pages: int = 300, seed: int = 1) -> bytes:
    """``pages`` pages of about 2,800 characters each (compressed content streams in
    Helvetica) and a 30 kB JPEG-typed image each (random bytes: never decoded for text)."""
    from tests.pdfs import FONT, content_stream, stream, write_pdf

    rng = random.Random(seed)
    kids = b" ".join(b"%d 0 R" % (4 + 3 * i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        FONT,
    ]
    for i in range(pages):
        lines = [" ".join(rng.choice(WORDS) for _ in range(12)) + "." for _ in range(40)]
        content = content_stream(lines) + b"\nq 200 0 0 150 56 60 cm /Im1 Do Q"
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font "
            b"<< /F1 3 0 R >> /XObject << /Im1 %d 0 R >> >> /Contents %d 0 R >>"
            % (6 + 3 * i, 5 + 3 * i)
        )
        objects.append(stream(zlib.compress(content), b"/Filter /FlateDecode "))
        objects.append(
            stream(
                rng.randbytes(30_000),
                b"/Type /XObject /Subtype /Image /Width 400 /Height 300 /ColorSpace "
                b"/DeviceRGB /BitsPerComponent 8 /Filter /DCTDecode ",
            )
        )
    return write_pdf(objects)


def vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def children_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


#: What ``query-300`` reads the report for (words its pages use, unevenly).
QUERY = "heat pump compressor refrigerant winter subsidy"


def _file(case: str) -> tuple[bytes, dict[str, Any]]:
    from tests.pdfs import bomb_pdf, deep_tree_pdf, make_pdf, many_pages_pdf

    if case in ("normal-300", "query-300"):
        return realistic_pdf(), {}
    if case == "all-300":
        return realistic_pdf(), {"max_pages": 300, "max_chars": 10_000_000, "timeout": 60.0}
    if case == "bomb":
        return bomb_pdf(4 << 30), {}
    if case == "pages-5000":
        return many_pages_pdf(5000), {}
    if case == "tree-5000":
        return deep_tree_pdf(5000), {}
    if case == "slow-page":
        return make_pdf([["heat pumps"] * 400_000], compress=True), {}
    raise ValueError(case)


def _outcome(result: Any) -> str:
    from core.documents import DocumentUnreadable

    if isinstance(result, DocumentUnreadable):
        return f"unreadable: {result.reason}"
    return f"{result.pages_read}/{result.pages_total} pages, {len(result.text):,} chars"


async def _extract_case(case: str) -> dict[str, Any]:
    from core.documents import DocumentExtractor, DocumentUnreadable

    data, options = _file(case)
    query = QUERY if case == "query-300" else ""
    before = vm_hwm_mb()
    timings, outcomes = [], []
    async with DocumentExtractor(**options) as documents:
        for _ in range(2):
            start = time.perf_counter()
            try:
                result: Any = await documents.extract(data, "pdf", query)
            except DocumentUnreadable as unreadable:
                result = unreadable
            timings.append(time.perf_counter() - start)
            outcomes.append(_outcome(result))
        started = documents.started
    return {
        "case": case,
        "file_mb": round(len(data) / 1e6, 2),
        "first_s": round(timings[0], 3),
        "second_s": round(timings[1], 3),
        "outcome": outcomes[0],
        "workers_started": started,
        "bot_peak_mb_before": round(before, 1),
        "bot_peak_mb": round(vm_hwm_mb(), 1),
        "worker_peak_mb": round(children_mb(), 1),
    }


async def _round_case() -> dict[str, Any]:
    import httpx
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    from core.documents import DocumentExtractor
    from core.pages.fetch import PageFetcher
    from core.pages.reader import PageReader
    from tests.fakes.server import BackgroundServer
    from tests.pdfs import bomb_pdf, deep_tree_pdf, many_pages_pdf

    files = {
        "bomb.pdf": bomb_pdf(4 << 30),
        "pages.pdf": many_pages_pdf(5000),
        "tree.pdf": deep_tree_pdf(5000),
    }

    def serve(name: str) -> Route:
        body = files[name]
        return Route(f"/{name}", lambda r: Response(body, media_type="application/pdf"))

    app = Starlette(routes=[serve(name) for name in files])
    before = vm_hwm_mb()
    with BackgroundServer(app) as site:
        async with httpx.AsyncClient(trust_env=False) as http:
            fetcher = PageFetcher(http, timeout=8.0, max_bytes=8 << 20, allow_loopback=True)
            reader = PageReader(fetcher, pages=3, documents=DocumentExtractor())
            start = time.perf_counter()
            reading = await reader.read([f"{site.url}/{n}" for n in files], "heat pumps grid")
            wall = time.perf_counter() - start
            await reader.aclose()
    kept = [f"{p.url.rsplit('/', 1)[1]}: {len(p.passages)} passages" for p in reading.pages]
    skipped = [f"{s.url.rsplit('/', 1)[1]}: {s.reason}" for s in reading.skipped]
    return {
        "case": "round",
        "file_mb": round(sum(len(f) for f in files.values()) / 1e6, 2),
        "first_s": round(wall, 3),
        "second_s": None,
        "outcome": "; ".join(kept + skipped),
        "bot_peak_mb_before": round(before, 1),
        "bot_peak_mb": round(vm_hwm_mb(), 1),
        "worker_peak_mb": round(children_mb(), 1),
    }


def real_pdf(case: str) -> bytes:
    """The manual of ``case``, fetched from Debian's archive the first time."""
    package, inside, _ = MANUALS[case]
    path = REAL_PDFS / package / inside
    if not path.exists():
        REAL_PDFS.mkdir(parents=True, exist_ok=True)
        subprocess.run(["apt-get", "download", package], cwd=REAL_PDFS, check=True)
        (deb,) = REAL_PDFS.glob(f"{package}_*.deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(REAL_PDFS / package)], check=True)
    return path.read_bytes()


def _pages_by_plain_bm25(data: bytes, query: str, count: int = 50) -> list[int]:
    """The pages a scan must find: every page's text straight from pypdfium2, BM25-ranked for
    ``query`` (``core.documents.extract``), the best ``count`` that share a term with it, in order
    (what ``core.documents.pdf._relevant`` computes, with nothing cut short)."""
    import pypdfium2 as pdfium

    from core.documents.extract import bm25_scores, terms
    from core.documents.pdf import _tidy

    document = pdfium.PdfDocument(data)
    try:
        texts = [_tidy(document[n].get_textpage().get_text_range()) for n in range(len(document))]
    finally:
        document.close()
    scores = bm25_scores([terms(text) or [""] for text in texts], terms(query))
    ranked = sorted(range(len(texts)), key=lambda n: (-scores[n], n))
    return sorted(n + 1 for n in ranked[:count] if scores[n] > 0)


async def _scan_case(case: str) -> dict[str, Any]:
    from core.documents import DocumentExtractor

    data, query = real_pdf(case), MANUALS[case][2]
    before = vm_hwm_mb()
    async with DocumentExtractor(timeout=60.0) as documents:
        await documents.extract(data, "pdf")  # (starts the worker)
        start = time.perf_counter()
        first = await documents.extract(data, "pdf")
        first_s = time.perf_counter() - start
        start = time.perf_counter()
        found = await documents.extract(data, "pdf", query)
        scan_s = time.perf_counter() - start
    async with DocumentExtractor() as documents:  # the default limits: 10 s
        await documents.extract(data, "pdf")
        capped = await documents.extract(data, "pdf", query)
    expected = _pages_by_plain_bm25(data, query)
    assert list(found.pages) == expected, (found.pages, expected)
    return {
        "case": case,
        "file_mb": round(len(data) / 1e6, 2),
        "first_s": round(first_s, 3),
        "second_s": round(scan_s, 3),
        "ratio": round(scan_s / first_s, 1),
        "outcome": f"{first.pages_total} pages; best 50: {page_ranges(found.pages)}"
        f" (as plain BM25 finds); at 10 s: "
        f"{'the same' if capped.pages == found.pages else page_ranges(capped.pages)}",
        "bot_peak_mb_before": round(before, 1),
        "bot_peak_mb": round(vm_hwm_mb(), 1),
        "worker_peak_mb": round(children_mb(), 1),
    }


def run_case(case: str) -> dict[str, Any]:
    """One case in its own process (its peak RSS is its own)."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.pdf", "--case", case, "--json"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pdf", description=__doc__)
    parser.add_argument("--case", choices=CASES, help="one case (default: all)")
    parser.add_argument("--json", action="store_true", help="print the case's JSON only")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.case and args.json:
        if args.case == "round":
            work = _round_case()
        elif args.case in MANUALS:
            work = _scan_case(args.case)
        else:
            work = _extract_case(args.case)
        print(json.dumps(asyncio.run(work)))
        return 0
    results = [run_case(case) for case in ([args.case] if args.case else CASES)]
    for r in results:
        if "ratio" in r:
            print(f"{r['case']}: the scan costs {r['ratio']}x reading the first pages")
    print("| case | file | first | second | outcome | bot peak RSS | worker peak RSS |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        second = "-" if r["second_s"] is None else f"{r['second_s']:.2f} s"
        peak = f"{r['bot_peak_mb_before']} -> {r['bot_peak_mb']} MB"
        print(
            f"| {r['case']} | {r['file_mb']} MB | {r['first_s']:.2f} s | {second} | "
            f"{r['outcome']} | {peak} | {r['worker_peak_mb']} MB |"
        )
    hostile = [r for r in results if r["case"] in ("bomb", "pages-5000", "tree-5000", "round")]
    met = all(r["first_s"] < GOAL_SECONDS and r["bot_peak_mb"] < GOAL_MB for r in hostile)
    print(f"goal (< {GOAL_SECONDS:g} s, bot < {GOAL_MB:g} MB) for the hostile files: {met}")
    if not args.case:
        args.output.write_text(
            json.dumps({"cpu": cpu_model(), "cpus": os.cpu_count(), "results": results}, indent=2)
            + "\n",
            encoding="utf-8",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
