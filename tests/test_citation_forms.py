"""Every form a writer cites in is checked as a claim, and a paragraph's closing citations
cover each of its sentences (issue 52, item 1).

The runs are real (``fathom research --json`` against the fakes): the writer is scripted with
a report citing in one form; the fake verifier judges as a careful one would
(``FakeLLM.citing = "mixed"``: a claim is supported when a source it cites says it, else it
names the source that does). Each report holds one claim cited right and one cited to a source
that does not say it, so a form the check did not read would leave the miscitation standing.
The sources are the fake search's first results for the fake planner's first topic
(``<topic> — overview``); the page of result ``i`` says ``adoption rose {10+i}%``
(``tests.fakes.search.article``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from core.claims import claims_of
from core.claims.citations import normalise_citations
from tests.cli import fathom
from tests.fakes import FakeLLMServer, FakeSearchServer, Reply
from tests.fakes.search import slug

TOPIC = "heat pumps"
#: The fake planner's first search for TOPIC.
QUERY = f"{TOPIC} — overview"


def said(i: int, rose: str | None = None) -> str:
    """The sentence of source ``i``'s page that a writer copies (with another figure: one no
    source has)."""
    return (
        f"The full report on {QUERY} states that measured adoption rose {rose or f'{10 + i}%'} "
        f"in 2026, according to page {i} of the source."
    )


def research(
    llm_server: FakeLLMServer, cli_env: dict[str, str], tmp_path: Path, report: str
) -> dict[str, Any]:
    """``fathom research TOPIC --depth 1 --json`` with the writer answering ``report`` and a
    careful verifier."""
    llm_server.fake.citing = "mixed"  # the verifier judges by what the sources say
    llm_server.fake.script("writer", Reply(report))
    result = fathom("research", TOPIC, "--depth", "1", "--json", env=cli_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def address(search: FakeSearchServer, i: int) -> str:
    return f"{search.url}/pages/{slug(QUERY)}/{i}"


#: How a writer cites a sentence to some sources in one form (``url``: a source's address).
Cite = Callable[[str, tuple[int, ...], Callable[[int], str]], str]


def after(marker: Callable[[tuple[int, ...]], str]) -> Cite:
    """The sentence, then ``marker`` of the numbers."""
    return lambda sentence, numbers, url: f"{sentence} {marker(numbers)}"


def joined(template: str, separator: str = "") -> Callable[[tuple[int, ...]], str]:
    return lambda numbers: separator.join(template.format(n) for n in numbers)


def linked(sentence: str, numbers: tuple[int, ...], url: Callable[[int], str]) -> str:
    """The sentence with its words "full report" linked to the (first) source."""
    return sentence.replace("full report", f"[full report]({url(numbers[0])})")


def in_parentheses(sentence: str, numbers: tuple[int, ...], url: Callable[[int], str]) -> str:
    """The (first) source's address in parentheses before the full stop."""
    return f"{sentence.removesuffix('.')} ({url(numbers[0])})."


def footnote_label(n: int) -> int:
    """The writer's own footnote numbers run the other way from the sources' (5 - n), so a
    footnote read as the source of its number would cite the wrong one."""
    return 5 - n


#: Each form, with the real source that shows models writing it.
FORMS: dict[str, Cite] = {
    # vectara/open-rag-eval#19: Vectara's generative LLM answers "... programs. [1, 2, 3, 4, 5]"
    "grouped": after(lambda ns: "[" + ", ".join(map(str, ns)) + "]"),
    # ItzCrazyKns/Vane#719 (Perplexica): small local LLMs write "[1,2,3,4,5]" and "[1,2][3]"
    "grouped without spaces": after(lambda ns: "[" + ",".join(map(str, ns)) + "]"),
    # SchrodingersCattt/EvoMaster, citation_and_output_format.md: what its writers produce and
    # it forbids, "[2,3], [2, 3], [2–3], [2; 3]"
    "ranged": after(lambda ns: f"[{ns[0]}-{ns[-1]}]"),
    "ranged with a dash": after(lambda ns: f"[{ns[0]}–{ns[-1]}]"),
    "separated by semicolons": after(lambda ns: "[" + "; ".join(map(str, ns)) + "]"),
    # onyx-dot-app/onyx#3294: "Citations where the LLM produces double brackets"
    "double brackets": after(joined("[[{}]]")),
    # cubeplexai/cubeplex#125: DeepSeek writing full-width 【N-M】 markers in its answers; Chinese
    # text writes brackets full-width (zotero-chinese/styles#377: "［D］")
    "full-width brackets": after(lambda ns: "【" + "，".join(map(str, ns)) + "】"),
    "full-width square brackets": after(joined("［{}］")),
    # deepseek-ai/DeepSeek-V3#1626: DeepSeek's search answers carry "[citation:2]" and
    # "[Reference 1]" markers
    "labelled citation": after(joined("[citation:{}]")),
    "labelled reference": after(joined("[Reference {}]")),
    # teng-lin/notebooklm-py#2141: NotebookLM's deep research reports carry "[cite: 12]"
    "labelled cite": after(lambda ns: "[cite: " + ", ".join(map(str, ns)) + "]"),
    # reddb-io/reddb#393: LLMs asked to emit "[^N] markers placed at factual claims"
    "footnotes": after(joined("[^{}]")),
    # sho7650/obsidian-AI-exporter#8: Gemini Deep Research as "Text[^1]" with "[^1]: [Title](URL)"
    # at the end (the definitions: FOOTNOTES)
    "footnotes with definitions": after(lambda ns: "".join(f"[^{footnote_label(n)}]" for n in ns)),
    # esengine/DeepSeek-Reasonix#5819: sources cited "as inline Markdown [文字](url) or bare URLs"
    "markdown links": linked,
    "bare addresses": in_parentheses,
    # SchrodingersCattt/EvoMaster: "In text use `[n](url)`"
    "numbered links": lambda sentence, ns, url: f"{sentence} [{ns[0]}]({url(ns[0])})",
    "numbered links in double brackets": lambda sentence, ns, url: (
        f"{sentence} [[{ns[0]}]]({url(ns[0])})"
    ),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_every_citation_form_is_checked_as_a_claim(
    form: str,
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """A claim cited in ``form`` is checked: the right one (cited to sources 1 and 3) is
    supported, the miscited one (source 2's sentence cited to 3 and 4) is re-cited to the
    source that says it; both are counted in the note and in ``claims``."""

    def url(i: int) -> str:
        return address(search_server, i)

    cite = FORMS[form]
    report = (
        "# Heat pumps\n\n## Main findings\n\n"
        f"- {cite(said(1), (1, 3), url)}\n- {cite(said(2), (3, 4), url)}\n"
    )
    if form == "footnotes with definitions":
        report += "".join(f"\n[^{footnote_label(n)}]: [Source {n}]({url(n)})" for n in range(1, 5))
    data = research(llm_server, cli_env, tmp_path, report)
    url_of = {s["n"]: s["url"] for s in data["sources"]}
    first, second = data["claims"]
    assert (first["text"], first["verdict"], first["fixed"]) == (said(1), "supported", None)
    assert url_of[first["cited"][0]] == url(1)
    assert (second["text"], second["verdict"], second["fixed"]) == (
        said(2),
        "unsupported",
        "recited",
    )
    assert url_of[second["source"]] == url(2)
    findings = data["report_markdown"].split("## Main findings\n\n", 1)[1]
    line_one, line_two = findings.split("\n\n", 1)[0].splitlines()
    # The form was made [n] (no trace of it left), and the miscited claim cites its source.
    assert re.findall(r"\[([^\]]*)\]", line_two) == [str(second["source"])]
    assert not re.search(r"http|\]\(|[【】［］^]|\[\[", line_one + line_two)
    assert "Citations checked: 1 of 2 claims supported by their sources; 1 fixed." in data["notes"]


def test_a_paragraph_s_closing_citations_check_each_of_its_sentences(
    llm_server: FakeLLMServer, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """``A. B. C. [1][2][3]`` with an invented number in A: each sentence is a claim citing the
    three sources; A is marked, B and C stand, and the paragraph keeps its citations."""
    invented = said(1, rose="417%")
    paragraph = f"{invented} {said(2)} {said(3)} [1][2][3]"
    data = research(llm_server, cli_env, tmp_path, f"# Heat pumps\n\n## Findings\n\n{paragraph}\n")
    claims = data["claims"]
    assert [(c["text"], c["cited"], c["verdict"], c["fixed"]) for c in claims] == [
        (invented, [1, 2, 3], "unsupported", "unverified"),
        (said(2), [1, 2, 3], "supported", None),
        (said(3), [1, 2, 3], "supported", None),
    ]
    marked = invented.removesuffix(".") + " *(not verified)*."
    assert f"{marked} {said(2)} {said(3)} [1][2][3]" in data["report_markdown"]
    assert "Citations checked: 2 of 3 claims supported by their sources; 1 fixed." in data["notes"]


def test_a_failing_last_sentence_leaves_the_paragraph_s_citations_to_the_others(
    llm_server: FakeLLMServer, cli_env: dict[str, str], tmp_path: Path
) -> None:
    """The sentence that carries the closing citations is the invented one: it is marked and
    loses them, and they follow the sentences they still support."""
    invented = said(3, rose="417%")
    paragraph = f"{said(1)} {said(2)} {invented} [1][2]"
    data = research(llm_server, cli_env, tmp_path, f"# Heat pumps\n\n## Findings\n\n{paragraph}\n")
    assert [(c["verdict"], c["fixed"]) for c in data["claims"]] == [
        ("supported", None),
        ("supported", None),
        ("unsupported", "unverified"),
    ]
    marked = invented.removesuffix(".") + " *(not verified)*."
    assert f"{said(1)} {said(2)} [1][2] {marked}\n" in data["report_markdown"]


def test_a_sentence_citing_its_paragraph_s_sources_is_re_cited_on_its_own(
    llm_server: FakeLLMServer,
    search_server: FakeSearchServer,
    cli_env: dict[str, str],
    tmp_path: Path,
) -> None:
    """Source 2's sentence in a list item whose closing citation is source 1: it is re-cited
    to source 2 in place; the item's last sentence keeps source 1."""
    item = f"- {said(2)} {said(1)} [1]"
    data = research(llm_server, cli_env, tmp_path, f"# Heat pumps\n\n## Findings\n\n{item}\n")
    moved, kept = data["claims"]
    assert (moved["verdict"], moved["fixed"], kept["verdict"]) == (
        "unsupported",
        "recited",
        "supported",
    )
    url_of = {s["n"]: s["url"] for s in data["sources"]}
    assert url_of[moved["source"]] == address(search_server, 2)
    assert url_of[kept["cited"][0]] == address(search_server, 1)
    recited = said(2).removesuffix(".") + f" [{moved['source']}]."
    assert f"- {recited} {said(1)} [{kept['cited'][0]}]" in data["report_markdown"]


CLOSING = [((1, 2), True), ((1, 2), True), ((1, 2), False)]


@pytest.mark.parametrize(
    ("paragraph", "claims"),
    [
        # Before or after the closing mark, in English and in Chinese.
        ("Sales rose 12%. Prices fell. Costs held. [1][2]", CLOSING),
        ("Sales rose 12%. Prices fell. Costs held [1] [2].", CLOSING),
        ("- Sales rose 12%. Prices fell.\n  Costs held [1][2].", CLOSING),  # a list item
        ("销量增长了12%。价格下降。成本持平[1][2]。", CLOSING),
        ("销量增长了12%。价格下降。成本持平。[1][2]", CLOSING),
        # A question states nothing; citations inside the paragraph are each sentence's own.
        ("Did sales rise? They rose 12% [1].", [((1,), False)]),
        ("Sales rose 12% [1]. Prices fell. Costs held [2].", [((1,), False), ((2,), False)]),
        ("Sales rose 12% [1] and prices fell [2]. Costs held.", [((1, 2), False)]),
        ("Sales rose 12%. Prices fell [1] and costs held [2].", [((1, 2), False)]),
    ],
)
def test_which_sentences_a_paragraph_s_closing_citations_cover(
    paragraph: str, claims: list[tuple[tuple[int, ...], bool]]
) -> None:
    found = claims_of(f"## Findings\n\n{paragraph}\n\nAnother paragraph [4].\n")
    assert [(c.cites, c.shared) for c in found] == [*claims, ((4,), False)]


KNOWN = {"https://example.org/a": 1, "https://example.org/b": 2}


@pytest.mark.parametrize(
    ("written", "normal"),
    [
        ("A [1, 2]. B [3-5]. C [2; 1]. D [7–6].", "A [1][2]. B [3][4][5]. C [2][1]. D [7][6]."),
        ("A [1-40].", "A [1][40]."),  # a range of 20 or more: its ends
        ("A [[2]]. B 【1，2】。C ［3］。", "A [2]. B [1][2]。C [3]。"),
        ("A [citation:1]. B [Source 2]. C [refs: 1, 2].", "A [1]. B [2]. C [1][2]."),
        ("A [^1]. B [^note].", "A [1]. B [^note]."),  # an undefined label names no source
        (
            "A [^x]. B [^y]. C [^z].\n\n[^x]: [one](https://example.org/a)\n"
            "[^y]: https://evil.example/y\n[^z]: see [2]\n",
            "A [1]. B . C [2].",
        ),
        ("A ([one](https://example.org/b/)). B [x](https://evil.example).", "A (one [2]). B x."),
        ("A https://example.org/a. B <https://evil.example/q>.", "A [1]. B ."),
        # Not citations: an enumeration, a year, exponents, a link to a page anchor.
        ("(1) cost and (2) risk (2019); 10^6 cells¹; [3](#note)", None),
    ],
)
def test_each_citation_form_becomes_n(written: str, normal: str | None) -> None:
    found = normalise_citations(written, lambda url: KNOWN.get(url.rstrip("/")))
    assert found.markdown == (written if normal is None else normal)
    assert found.unlinked == len(re.findall(r"evil\.example", written))
