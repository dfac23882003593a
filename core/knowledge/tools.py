"""Which tool of an MCP server Fathom calls, decided once when it connects.

The configured ``tool``; or else the one tool that searches: its name or description says so
(search, find, look up, retrieve, query...), it takes the query in a string parameter named
like one (``query``, ``q``, ``search``, ``text``...) or, when its name says ``search``, in its
one required string parameter, and it neither writes (``destructiveHint: true`` or
``readOnlyHint: false``, or a name or description that starts with creating, deleting,
updating...) nor executes what it is sent (SQL or another query language, a shell, code, a
command: :func:`core.knowledge.statements.executes`). Of several such tools, those annotated
``readOnlyHint: true`` are preferred. A tool that executes what it is sent is never chosen by
itself; named by hand, one that runs shell commands or code is refused, and one that runs
statements only with ``fathom.statements: "read-only"``, which then sends it no text that
reads as anything but a read (:func:`~core.knowledge.statements.statement_refusal`; the
option also guards a named tool this module does not recognise). The query never goes into a
parameter that takes an address (a URL or a path, by its name or its schema's ``format``)
unless the operator named that tool; then only queries that are not addresses are sent
(:func:`looks_like_address`). The constant ``arguments`` (``fathom.arguments``) are checked
against the tool's input schema here and sent with every call; with them, every required
parameter must be given. Anything else is a start-up problem that lists the server's tools, so
the operator can name one. The model never chooses: Fathom only ever calls this tool with
``{argument: query, **arguments}``.

Tools are read by their attributes (``name``, ``description``, ``input_schema``,
``output_schema``, ``annotations``): this module does not import the SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.knowledge.statements import Executes, Execution, executes, name_words
from core.search.base import result_text

#: At most this many tool names are listed in a problem.
MAX_LISTED = 12
#: Parameter names that take a search query.
QUERY_NAMES = ("query", "q", "search", "search_query", "text", "keywords", "term", "terms")
#: Parameter names that take an address: a URL, a URI or a path.
ADDRESS_NAMES = frozenset(
    {"url", "uri", "iri", "link", "href", "path", "file", "filename", "file_path", "filepath",
     "dir", "directory", "folder", "repo_path", "repository", "location"}
)  # fmt: skip
#: JSON-schema formats of an address.
ADDRESS_FORMATS = frozenset({"uri", "uri-reference", "iri", "iri-reference", "url", "path"})
_ADDRESS = re.compile(
    r"^\s*(?:[a-z][a-z0-9+.-]*:/?/|[~/\\.]|[a-z]:\\|(?:\d{1,3}\.){3}\d{1,3}|\[[0-9a-f:]+\]"
    r"|(?:[\w-]+\.)+[a-z]{2,}(?::\d+)?(?:/|$)|localhost\b|file:|mailto:|data:)",
    re.IGNORECASE,
)
#: Words of a tool's name or description that say it searches.
SEARCH_WORDS = frozenset(
    {"search", "searches", "find", "finds", "lookup", "look", "looks", "retrieve",
     "retrieves", "recall", "query", "queries", "grep", "semantic"}
)  # fmt: skip
#: Verbs of a tool that changes things: anywhere in its name...
_WRITE_VERBS = frozenset(
    {"create", "insert", "update", "delete", "remove", "drop", "write", "upsert", "truncate",
     "purge", "destroy", "erase", "overwrite"}
)  # fmt: skip
#: ...or, these too, as the first word of its name or description.
_FIRST_WRITE_VERBS = _WRITE_VERBS | frozenset(
    {"add", "set", "put", "post", "patch", "append", "edit", "modify", "rename", "move",
     "upload", "send", "publish", "save", "store", "merge", "push", "commit", "archive",
     "import", "clear", "reset", "replace"}
)  # fmt: skip
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


class ToolProblem(Exception):
    """The server offers no tool Fathom can call (the message lists its tools)."""


@dataclass(frozen=True)
class ToolChoice:
    name: str
    #: The parameter that receives the query.
    argument: str
    #: The tool's output schema, when it declares one (it says where results stand).
    output_schema: Mapping[str, Any] | None = None
    #: Constant arguments sent with every call (``fathom.arguments``).
    arguments: Mapping[str, Any] = field(default_factory=dict)
    #: Whether ``argument`` takes an address: then no query that looks like one is sent.
    takes_address: bool = False
    #: Whether only texts that hold no statement but a read are sent (``fathom.statements:
    #: "read-only"``).
    reads_only: bool = False


def resolve_tool(
    tools: Sequence[Any],
    tool: str | None,
    argument: str | None,
    arguments: Mapping[str, Any] | None = None,
    statements: str | None = None,
) -> ToolChoice:
    """The tool to call (see the module); ToolProblem when there is none or more than one,
    or when the named one executes what it is sent and may not (``statements``: the
    server's ``fathom.statements``)."""
    constants = dict(arguments or {})
    reads_only = statements == "read-only"
    if tool is not None:
        found = next((t for t in tools if getattr(t, "name", None) == tool), None)
        if found is None:
            raise ToolProblem(f"has no tool {tool!r}; its tools: {listing(tools)}")
        _check_named(found, reads_only)
        parameter = argument or query_parameter(found, constants)
        if parameter is None:
            raise ToolProblem(
                f"tool {tool!r} has no single required string parameter; "
                "set fathom.argument to the one that takes the query"
            )
        return _choice(found, parameter, constants, reads_only)
    candidates: list[tuple[Any, str]] = []
    executing: list[tuple[Any, Execution]] = []
    for candidate in tools:
        execution = executes(candidate)
        if execution is not None:
            executing.append((candidate, execution))
            continue
        if writes(candidate):
            continue
        if argument is not None:
            parameter = argument if _string_property(candidate, argument) else None
        else:
            parameter = search_parameter(candidate, constants)
        if parameter is not None and not _takes_address(candidate, parameter):
            candidates.append((candidate, parameter))
    read_only = [(c, p) for c, p in candidates if _hint(c, "read_only_hint", "readOnlyHint")]
    candidates = read_only or candidates
    if len(candidates) == 1:
        chosen, parameter = candidates[0]
        return _choice(chosen, parameter, constants, reads_only)
    if not candidates:
        what = (
            f"a string parameter {argument!r}"
            if argument
            else "a search query (a search tool taking a parameter named query, q, search or "
            "text, or its one required string; never one that writes or runs statements or "
            "code)"
        )
        executing_said = "".join(
            f"; {_name(c)} {e.said} and is never chosen by itself" for c, e in executing[:2]
        )
        raise ToolProblem(
            f"no tool takes {what}; set fathom.tool to one of its tools: {listing(tools)}"
            f"{executing_said}"
        )
    raise ToolProblem(
        f"{len(candidates)} tools could take the query "
        f"({listing([c for c, _ in candidates])}); set fathom.tool to the one to call"
    )


def _check_named(tool: Any, reads_only: bool) -> None:
    """ToolProblem when the named ``tool`` executes what it is sent and may not: shell
    commands or code never, statements only when the operator opted in to reads."""
    execution = executes(tool)
    if execution is None:
        return
    name = _name(tool)
    if execution.runs is Executes.CODE:
        raise ToolProblem(
            f"tool {name!r} {execution.said}: Fathom never sends model-written text to one; "
            "name a search tool"
        )
    if not reads_only:
        raise ToolProblem(
            f"tool {name!r} {execution.said}: Fathom would send it model-written text, which "
            'a web page can steer; name a search tool, or set fathom.statements to "read-only" '
            "to send it nothing but reads"
        )


def search_parameter(tool: Any, constants: Mapping[str, Any] | None = None) -> str | None:
    """The parameter of a tool that searches (its name or description says so) and takes the
    query: a string property named like a query, or, when its name says search, its one
    required string (required parameters ``constants`` give aside); None when it looks like
    no search."""
    if not searches(tool):
        return None
    properties = _properties(tool)
    for name in QUERY_NAMES:
        if name in properties and _string_property(tool, name):
            return name  # (fathom.arguments setting it is a problem _check_arguments names)
    if "search" in str(getattr(tool, "name", "")).lower():
        return query_parameter(tool, constants)
    return None


def query_parameter(tool: Any, constants: Mapping[str, Any] | None = None) -> str | None:
    """The name of the tool's one required parameter (those ``constants`` give aside) when
    it is a string, else None."""
    schema = getattr(tool, "input_schema", None)
    if not isinstance(schema, Mapping):
        return None
    required = schema.get("required")
    if not isinstance(required, list):
        return None
    left = [name for name in required if isinstance(name, str) and name not in (constants or {})]
    if len(left) != 1:
        return None
    return left[0] if _string_property(tool, left[0]) else None


def looks_like_address(query: str) -> bool:
    """Whether ``query`` reads as an address (a URL, a path, a host or an IP address) rather
    than words: such a query is never sent to a parameter that takes an address."""
    return bool(_ADDRESS.match(query))


def listing(tools: Sequence[Any]) -> str:
    """The tools' names, inert and at most :data:`MAX_LISTED` of them ('none' for none)."""
    names = [result_text(getattr(t, "name", ""))[:64] or "?" for t in tools]
    if not names:
        return "none"
    shown = ", ".join(names[:MAX_LISTED])
    return shown if len(names) <= MAX_LISTED else f"{shown} and {len(names) - MAX_LISTED} more"


def searches(tool: Any) -> bool:
    """Whether a tool's name or description says it searches (:data:`SEARCH_WORDS`)."""
    words = set(name_words(str(getattr(tool, "name", "") or "")))
    description = getattr(tool, "description", None)
    if isinstance(description, str):
        words.update(re.findall(r"[a-z]+", description[:500].lower()))
    return bool(words & SEARCH_WORDS)


def writes(tool: Any) -> bool:
    """Whether the tool says it changes things: ``destructiveHint: true`` or ``readOnlyHint:
    false`` (in the SDK's or the wire's spelling), or, unless it is annotated
    ``readOnlyHint: true``, a name holding a verb of writing (``delete_note``,
    ``update-page``) or a name or description that starts with one ("Create or update a
    note.")."""
    if _hint(tool, "destructive_hint", "destructiveHint") is True:
        return True
    read_only = _hint(tool, "read_only_hint", "readOnlyHint")
    if read_only is not None:
        return read_only is False
    words = name_words(str(getattr(tool, "name", "") or ""))
    if set(words) & _WRITE_VERBS or (words and words[0] in _FIRST_WRITE_VERBS):
        return True
    description = getattr(tool, "description", None)
    first = re.match(r"\s*([A-Za-z]+)", description) if isinstance(description, str) else None
    verb = first.group(1).lower() if first else ""
    return verb in _FIRST_WRITE_VERBS or verb.removesuffix("s") in _FIRST_WRITE_VERBS


def _hint(tool: Any, *names: str) -> object:
    """An annotation of the tool (the first of ``names`` it has), or None."""
    annotations = getattr(tool, "annotations", None)
    if annotations is None:
        return None
    for name in names:
        value = (
            annotations.get(name)
            if isinstance(annotations, Mapping)
            else getattr(annotations, name, None)
        )
        if value is not None:
            return value
    return None


def _name(tool: Any) -> str:
    return result_text(str(getattr(tool, "name", "")))[:64]


def _properties(tool: Any) -> Mapping[str, Any]:
    schema = getattr(tool, "input_schema", None)
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def _string_property(tool: Any, name: str) -> bool:
    spec = _properties(tool).get(name)
    if not isinstance(spec, Mapping):
        return False
    kind = spec.get("type")
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def _takes_address(tool: Any, name: str) -> bool:
    spec = _properties(tool).get(name)
    formats = spec.get("format") if isinstance(spec, Mapping) else None
    return name.lower() in ADDRESS_NAMES or formats in ADDRESS_FORMATS


def _choice(
    tool: Any, argument: str, constants: dict[str, Any], reads_only: bool = False
) -> ToolChoice:
    _check_arguments(tool, argument, constants)
    schema = getattr(tool, "output_schema", None)
    return ToolChoice(
        name=str(tool.name),
        argument=argument,
        output_schema=schema if isinstance(schema, Mapping) else None,
        arguments=constants,
        takes_address=_takes_address(tool, argument),
        reads_only=reads_only,
    )


def _check_arguments(tool: Any, argument: str, constants: Mapping[str, Any]) -> None:
    """ToolProblem unless the constant arguments fit the tool's input schema: known
    parameters of the declared types (and values), not the query's, and with the query
    every required parameter given."""
    name = _name(tool)
    if argument in constants:
        raise ToolProblem(f"fathom.arguments sets {argument!r}, which takes the query")
    properties = _properties(tool)
    schema = getattr(tool, "input_schema", None)
    closed = isinstance(schema, Mapping) and schema.get("additionalProperties") is False
    for key, value in constants.items():
        spec = properties.get(key)
        if not isinstance(spec, Mapping):
            if closed or properties:
                raise ToolProblem(
                    f"fathom.arguments: tool {name!r} has no parameter {key!r}; "
                    f"its parameters: {', '.join(map(str, properties)) or 'none'}"
                )
            continue
        problem = _type_problem(spec, value)
        if problem:
            raise ToolProblem(f"fathom.arguments.{key}: {problem} (tool {name!r})")
    required = schema.get("required") if isinstance(schema, Mapping) else None
    missing = [
        str(key)
        for key in (required if isinstance(required, list) else [])
        if key != argument and key not in constants
    ]
    if missing:
        raise ToolProblem(
            f"tool {name!r} also needs {', '.join(repr(m) for m in missing)}; "
            "set them in fathom.arguments"
        )


def _type_problem(spec: Mapping[str, Any], value: object) -> str | None:
    """Why ``value`` does not fit a property's schema (its ``type`` and ``enum``), or None."""
    kind = spec.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    allowed = tuple(t for k in kinds if isinstance(k, str) for t in _JSON_TYPES.get(k, ()))
    if allowed:
        fits = isinstance(value, allowed) and not (isinstance(value, bool) and bool not in allowed)
        if not fits:
            return f"expected {' or '.join(str(k) for k in kinds)}"
    enum = spec.get("enum")
    if isinstance(enum, list) and value not in enum:
        return f"expected one of {', '.join(repr(v) for v in enum[:10])}"
    return None
