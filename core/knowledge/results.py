"""What an MCP tool's answer becomes: internal search results (``SearchResult.server`` set).

Everything a server returns is untrusted, like a web page: titles and snippets enter through
:func:`core.search.base.result_text` (inert data), the document's text through the page
passages (:func:`core.documents.extract.split_passages`, BM25 :func:`~core.documents.extract.select`
against the query within the page budget, neutralised exactly like a page's), and every size
is capped before any work is done on it (a server answering 50 MB costs no more than 200 kB a
result).

An answer is read as, in this order:

1. structured content: the list under ``results``, the one array property the tool's output
   schema declares, or the content itself when it is a list; each item an object with
   ``title``, ``url`` or ``uri``, ``text``, ``snippet`` or ``content``, and optionally
   ``date``, ``published`` or ``updated``. Its text blocks then are its unstructured
   rendering and are not read again;
2. otherwise text blocks that parse as such JSON;
3. resource links (``uri``, ``name``/``title``, ``description``) and embedded text resources,
   each a result of its own;
4. the other text blocks, joined as one result titled after the server.

At most ``limit`` results; two with the same link are one. This module works on the SDK's
objects by their attributes and never imports the SDK (importing it costs most of a second).
"""

from __future__ import annotations

import ast
import json
import re
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.dates import parse_published
from core.documents.extract import select, split_passages
from core.models import SearchResult
from core.search.base import MAX_SNIPPET_CHARS, result_text

#: At most this much of one document's text is split into passages (what a page keeps).
MAX_TEXT_CHARS = 200_000
#: At most this much of a title is read.
MAX_TITLE_CHARS = 500
#: At most this much of a link is kept (a longer one is no link: it is dropped).
MAX_URL_CHARS = 2048
#: At most this many content blocks and structured items are looked at.
MAX_ITEMS = 200
#: At most this many columns of a row are read.
MAX_COLUMNS = 50
#: A text block larger than this is not parsed as JSON (it is read as text).
MAX_JSON_CHARS = 5_000_000
#: How much of an error the server gave is repeated in a SearchError.
MAX_REASON_CHARS = 200
#: Only an answer this short can say it found nothing in plain text...
MAX_ANSWER_TEXT = 1000
#: ...or be an error message (an error may quote the statement and a hint: mcp-alchemy's).
MAX_ERROR_TEXT = 4000
#: At most this much of a text is read as a Python literal (mcp-server-duckdb and
#: mcp-server-sqlite answer ``str(rows)``).
MAX_LITERAL_CHARS = 1_000_000
# What an error message says on its first line, in the words servers use: "Error: ...",
# "Database error: ...", "Error executing query: ...", "Unexpected server error - ...",
# "sqlite3.OperationalError: ...", "An error occurred while ...", "Failed to ...", a
# traceback; not a document that starts "Pump failure: ...", "Pump failed: ..." or "Error
# handling in the controller retries three times."
_ERROR_TEXT = re.compile(
    r"^(?:(?:[\w.]+\s+){0,2}(?:error|exception)(?:\s+\w+){0,4}\s*:"
    r"|(?:[\w.]+\s+){0,2}(?:error|exception)\s*[-\u2013\u2014]\s"
    r"|[\w.]*(?:error|exception):"
    r"|an?\s+(?:\w+\s+){0,2}error\s+(?:has\s+)?(?:occurred|occured|happened|was\s+encountered)\b"
    r"|error\s+(?:occurred|occured)\b"
    r"|failed\s+to\s+\w"
    r"|traceback\b)",
    re.IGNORECASE,
)
# A Python traceback at the start of an answer, or right after its first line ("Error
# calling tool:\nTraceback ..."), whatever the answer's length.
_TRACEBACK = re.compile(r"\A(?:[^\n]*\n){0,2}Traceback \(most recent call last\):")
# "No results found for ...", "No results for ...", "No results.", "0 results", "No rows
# returned" (mcp-alchemy); not a document that starts "No notes are kept for ...".
_NOTHING_TEXT = re.compile(
    r"^(?:no (?:results?|matches|matching \w+|notes|documents|entries|items|hits|records|rows)"
    r"(?:\b[^\n]{0,80}?\b(?:found|returned)\b|\s+(?:for|matched|match)\b|[.!]?\s*$)"
    r"|(?:found )?0 (?:results|matches|rows)\b)",
    re.IGNORECASE,
)
# What a "found nothing" answer may add that a person should see: the server may be blocked,
# limited or failing (duckduckgo-mcp-server: "This could be due to DuckDuckGo's bot
# detection...").
_NOTHING_HINT = re.compile(
    r"\b(?:block(?:ed|ing)?|bot[- ]detection|captcha|rate[- ]?limit\w*|quota|try again"
    r"|temporar\w*|unavailable|denied|forbidden|throttl\w*)\b",
    re.IGNORECASE,
)
#: What an empty answer looks like (an empty list of rows: ``str([])``, ``json.dumps([])``).
_EMPTY_ANSWERS = frozenset({"[]", "{}", "()", "null", "None", "[ ]"})

_TEXT_KEYS = ("text", "snippet", "content", "matched_chunk", "summary", "description")
_URL_KEYS = ("url", "uri", "permalink", "link")
_DATE_KEYS = ("date", "published", "updated")
_TITLE_KEYS = ("title", "name")
_LIST_KEYS = (
    "results", "result", "items", "data", "documents", "hits", "notes", "entries", "matches"
)  # fmt: skip


@dataclass(frozen=True)
class _Document:
    title: object
    url: object
    text: str
    date: object = None


def tool_results(
    result: Any,
    *,
    server: str,
    query: str,
    limit: int,
    budget_tokens: int,
    output_schema: Mapping[str, Any] | None = None,
) -> list[SearchResult]:
    """The search results in an SDK ``CallToolResult`` (see the module); ``server`` is the
    configured name every result carries."""
    content = list(getattr(result, "content", None) or [])[:MAX_ITEMS]
    texts = [block for block in content if getattr(block, "type", None) == "text"]
    items = _structured_items(getattr(result, "structured_content", None), output_schema)
    plain: list[str] = []
    if items is None:
        for block in texts:
            text = getattr(block, "text", None)
            if not isinstance(text, str):
                continue
            parsed = _json_items(text)
            if parsed is None:
                plain.append(text)
            else:
                items = (items or []) + parsed
    documents = [d for d in map(_item_document, (items or [])[:MAX_ITEMS]) if d is not None]
    documents.extend(_resource_documents(content))
    if plain:
        documents.append(_Document(server, "", _joined(plain)))
    out: list[SearchResult] = []
    seen: set[str] = set()
    for document in documents:
        made = _result(document, server=server, query=query, budget_tokens=budget_tokens)
        if made is None or (made.url and made.url in seen):
            continue
        if made.url:
            seen.add(made.url)
        out.append(made)
        if len(out) >= limit:
            break
    return out


@dataclass(frozen=True)
class TextAnswer:
    """An answer whose whole text says the call failed (``error``) or found nothing (then
    ``noted`` when it says more that a person should see: "you may be blocked")."""

    error: bool
    reason: str
    noted: bool = False


def text_answer(result: Any) -> TextAnswer | None:
    """What an answer that is only a short text means, when it is no document: an error in
    plain text (``Error: ...``, ``Error executing query: ...``, mcp-server-sqlite's ``Database
    error: ...``, ``An error occurred while ...``, a Python traceback, a JSON body with an
    ``error`` and no results), an empty list (``[]``), or "No results found for ..."
    (basic-memory; with a hint that the server may be blocked: ``noted``); None for any other
    answer (it is read as results)."""
    content = list(getattr(result, "content", None) or [])[:MAX_ITEMS]
    structured = getattr(result, "structured_content", None)
    if _structured_items(structured, None) is not None:  # (an SDK server's str return is
        return None  # ``{"result": "..."}``: no items, read as its text)
    if any(getattr(block, "type", None) != "text" for block in content):
        return None
    text = " ".join(
        block.text for block in content if isinstance(getattr(block, "text", None), str)
    ).strip()
    if text in _EMPTY_ANSWERS:
        return TextAnswer(False, "")
    if _TRACEBACK.match(text):
        return TextAnswer(True, short_text(_last_line(text)))
    if not text or len(text) > MAX_ERROR_TEXT:
        return None
    error = _json_error(structured) or _json_error(_loads(text))
    if error:
        return TextAnswer(True, short_text(error))
    first = text.split("\n", 1)[0]
    if _ERROR_TEXT.match(first):
        return TextAnswer(True, short_text(text))
    if len(text) <= MAX_ANSWER_TEXT and _NOTHING_TEXT.match(text):
        return TextAnswer(False, short_text(text), noted=bool(_NOTHING_HINT.search(text)))
    return None


def _last_line(text: str) -> str:
    """The last non-empty line of a traceback: the exception and its message."""
    lines = [line.strip() for line in text[-MAX_REASON_CHARS * 8 :].splitlines() if line.strip()]
    return lines[-1] if lines else "a traceback"


def _loads(text: str) -> object:
    if not text.startswith("{"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def _json_error(value: object) -> str:
    """The ``error`` of a JSON answer that carries one and no results, else ''."""
    if not isinstance(value, dict) or not value.get("error"):
        return ""
    if any(isinstance(v, list) and v for v in value.values()):
        return ""  # (results beside an error: the results count)
    error = value["error"]
    if isinstance(error, dict):
        error = error.get("message") or error.get("detail") or json.dumps(error)[:200]
    return str(error)


def error_reason(result: Any) -> str:
    """What a tool error (``isError``) says, short and inert ('' when it says nothing)."""
    texts = [
        block.text
        for block in list(getattr(result, "content", None) or [])[:MAX_ITEMS]
        if getattr(block, "type", None) == "text" and isinstance(getattr(block, "text", None), str)
    ]
    return short_text(" ".join(text[: MAX_REASON_CHARS * 4] for text in texts))


def short_text(text: str, limit: int = MAX_REASON_CHARS) -> str:
    """Untrusted text for a log line or an error: inert, on one line, at most ``limit``."""
    return _truncate(result_text(text[: limit * 4]), limit)


def _structured_items(
    structured: object, output_schema: Mapping[str, Any] | None
) -> list[Any] | None:
    """The items of structured content, None when it holds no list of results."""
    if isinstance(structured, list):
        return structured
    if not isinstance(structured, dict):
        return None
    found = _listed(structured)
    if found is not None:
        return found
    key = _array_property(output_schema)
    if key is not None and isinstance(structured.get(key), list):
        return list(structured[key])
    return None


def _listed(answer: Mapping[str, Any]) -> list[Any] | None:
    """The documents of a JSON answer: its list under ``results`` (or ``items``, ``data``,
    ``documents``, ``hits``, ``notes``, ``entries``, ``matches``: basic-memory's
    ``output_format: json`` and others), or None."""
    for key in _LIST_KEYS:
        found = answer.get(key)
        if isinstance(found, list):
            return found
    return None


def _array_property(schema: Mapping[str, Any] | None) -> str | None:
    """The one property of an output schema whose type is an array (None: none, or more)."""
    if not isinstance(schema, Mapping):
        return None
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    arrays = [
        name
        for name, spec in properties.items()
        if isinstance(spec, Mapping) and _is_array(spec.get("type"))
    ]
    return arrays[0] if len(arrays) == 1 else None


def _is_array(kind: object) -> bool:
    return kind == "array" or (isinstance(kind, list) and "array" in kind)


def _json_items(text: str) -> list[Any] | None:
    """The items of a text block that is a JSON answer (an object with ``results``, a list of
    objects, or a list of rows), or a Python list of rows (``str(cursor.fetchall())``: tuples
    or dicts); ``[]`` for an empty list; None for any other text."""
    stripped = text.strip()
    if not stripped or stripped[0] not in "[{(" or len(stripped) > MAX_JSON_CHARS:
        return None
    try:
        parsed: object = json.loads(stripped)
    except ValueError:
        parsed = _literal(stripped)
    if isinstance(parsed, dict):
        listed = _listed(parsed)
        if listed is None and _item_document(parsed) is not None and _is_document(parsed):
            return [parsed]  # (one document a block: an SDK server's list[Model], rendered)
        return listed
    if isinstance(parsed, list | tuple):
        rows = list(parsed)
        if all(isinstance(item, dict | list | tuple) for item in rows):
            return rows
    return None


def _literal(text: str) -> object:
    """``text`` read as a Python literal (a list or tuple of rows), or None: what
    mcp-server-duckdb and mcp-server-sqlite answer is ``str()`` of their rows."""
    if text[0] not in "[(" or len(text) > MAX_LITERAL_CHARS:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def _is_document(item: Mapping[str, Any]) -> bool:
    """Whether a JSON object reads as one document: a title and a link or a text."""
    titled = bool(_first_string(item, _TITLE_KEYS))
    return titled and bool(_first_string(item, _URL_KEYS) or _first_string(item, _TEXT_KEYS))


def _item_document(item: object) -> _Document | None:
    """One document of a list: an object with a text, a title or a link, or a row (an
    object of other columns, or a list of values), whose columns are its text."""
    if isinstance(item, list | tuple):
        return _row_document(item)
    if not isinstance(item, dict):
        return None
    text = _first_string(item, _TEXT_KEYS)
    title = _first_string(item, _TITLE_KEYS)
    url = _first_string(item, _URL_KEYS)
    if not text:  # (a row: its other columns say what it is)
        text = "; ".join(
            f"{key}: {value}"
            for key, value in list(item.items())[:MAX_COLUMNS]
            if _scalar(value) and key not in _URL_KEYS
        )
    if not (text or title or url):
        return None
    return _Document(title, url, text, _first(item, _DATE_KEYS))


def _row_document(row: Sequence[object]) -> _Document | None:
    """A row of values: its first short string is its title, its values its text."""
    values = [str(value) for value in row[:MAX_COLUMNS] if _scalar(value)]
    if not values:
        return None
    title = next((v for v in row if isinstance(v, str) and 0 < len(v) <= 120), "")
    return _Document(title, "", " | ".join(values))


def _scalar(value: object) -> bool:
    return isinstance(value, str | int | float) and value != ""


def _resource_documents(content: Sequence[Any]) -> Iterator[_Document]:
    for block in content:
        kind = getattr(block, "type", None)
        if kind == "resource_link":
            title = getattr(block, "title", None) or getattr(block, "name", None)
            description = getattr(block, "description", None)
            yield _Document(
                title,
                getattr(block, "uri", None),
                description if isinstance(description, str) else "",
            )
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            text = getattr(resource, "text", None)
            if not isinstance(text, str):
                continue  # (a blob: nothing to read)
            uri = getattr(resource, "uri", None)
            meta = getattr(resource, "meta", None)
            title = meta.get("title") if isinstance(meta, dict) else None
            yield _Document(title or _uri_name(uri), uri, text)


def _result(
    document: _Document, *, server: str, query: str, budget_tokens: int
) -> SearchResult | None:
    text = unicodedata.normalize("NFC", document.text[:MAX_TEXT_CHARS]).replace("\x00", "")
    title = document.title if isinstance(document.title, str) else ""
    url = _link(document.url)
    passages = [p.text for p in select(split_passages(text), query, budget_tokens)]
    snippet = _truncate(result_text(text[: MAX_SNIPPET_CHARS * 4]))
    if not (snippet or url or title):
        return None
    return SearchResult(
        title=result_text(title[:MAX_TITLE_CHARS]) or server,
        url=url,
        snippet=snippet,
        published=parse_published(document.date),
        server=server,
        passages=passages,
    )


def _link(value: object) -> str:
    """A document's link or URI as the server gave it (any scheme), or '' when it is none:
    not a string, too long, or holding spaces or control characters."""
    if not isinstance(value, str):
        return ""
    link = value.strip()
    if len(link) > MAX_URL_CHARS or any(c.isspace() or not c.isprintable() for c in link):
        return ""
    return link


def _uri_name(uri: object) -> str:
    if not isinstance(uri, str):
        return ""
    return uri.rstrip("/").rsplit("/", 1)[-1][:MAX_TITLE_CHARS]


def _first_string(item: Mapping[str, Any], keys: Sequence[str]) -> str:
    for key in keys:
        value = item.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return ""


def _first(item: Mapping[str, Any], keys: Sequence[str]) -> object:
    for key in keys:
        if item.get(key) is not None:
            return item[key]
    return None


def _joined(texts: Sequence[str]) -> str:
    joined: list[str] = []
    size = 0
    for text in texts:
        if size >= MAX_TEXT_CHARS:
            break
        piece = text[: MAX_TEXT_CHARS - size]
        joined.append(piece)
        size += len(piece) + 2
    return "\n\n".join(joined)


def _truncate(text: str, limit: int = MAX_SNIPPET_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
