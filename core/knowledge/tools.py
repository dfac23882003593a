"""Which tool of an MCP server Fathom calls, decided once when it connects.

The configured ``tool``; or else the one tool that looks like search: not marked destructive
(``destructiveHint: true``) or as writing (``readOnlyHint: false``), taking the query in a
string parameter named like one (``query``, ``q``, ``search``, ``text``...) or, when its name
says ``search``, in its one required string parameter. The query never goes into a parameter
that takes an address (a URL or a path, by its name or its schema's ``format``) unless the
operator named that tool; then only queries that are not addresses are sent
(:func:`looks_like_address`). The constant ``arguments`` (``fathom.arguments``) are checked
against the tool's input schema here and sent with every call; with them, every required
parameter must be given. Anything else is a start-up problem that lists the server's tools, so
the operator can name one. The model never chooses: Fathom only ever calls this tool with
``{argument: query, **arguments}``.

Tools are read by their attributes (``name``, ``input_schema``, ``output_schema``,
``annotations``): this module does not import the SDK.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

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


def resolve_tool(
    tools: Sequence[Any],
    tool: str | None,
    argument: str | None,
    arguments: Mapping[str, Any] | None = None,
) -> ToolChoice:
    """The tool to call (see the module); ToolProblem when there is none or more than one."""
    constants = dict(arguments or {})
    if tool is not None:
        found = next((t for t in tools if getattr(t, "name", None) == tool), None)
        if found is None:
            raise ToolProblem(f"has no tool {tool!r}; its tools: {listing(tools)}")
        parameter = argument or query_parameter(found, constants)
        if parameter is None:
            raise ToolProblem(
                f"tool {tool!r} has no single required string parameter; "
                "set fathom.argument to the one that takes the query"
            )
        return _choice(found, parameter, constants)
    candidates: list[tuple[Any, str]] = []
    for candidate in tools:
        if _writes(candidate):
            continue
        if argument is not None:
            parameter = argument if _string_property(candidate, argument) else None
        else:
            parameter = search_parameter(candidate, constants)
        if parameter is not None and not _takes_address(candidate, parameter):
            candidates.append((candidate, parameter))
    if len(candidates) == 1:
        chosen, parameter = candidates[0]
        return _choice(chosen, parameter, constants)
    if not candidates:
        what = (
            f"a string parameter {argument!r}"
            if argument
            else "a search query (a parameter named query, q, search or text, or a search "
            "tool's one required string; never a tool marked destructive)"
        )
        raise ToolProblem(
            f"no tool takes {what}; set fathom.tool to one of its tools: {listing(tools)}"
        )
    raise ToolProblem(
        f"{len(candidates)} tools could take the query "
        f"({listing([c for c, _ in candidates])}); set fathom.tool to the one to call"
    )


def search_parameter(tool: Any, constants: Mapping[str, Any] | None = None) -> str | None:
    """The parameter of a tool that looks like search and takes the query: a string
    property named like a query, or, when its name says search, its one required string
    (required parameters ``constants`` give aside); None when it looks like no search."""
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


def _writes(tool: Any) -> bool:
    """Whether the tool says it changes things (``destructiveHint: true`` or
    ``readOnlyHint: false``, in the SDK's or the wire's spelling)."""
    annotations = getattr(tool, "annotations", None)
    if annotations is None:
        return False

    def hint(*names: str) -> object:
        for name in names:
            value = (
                annotations.get(name)
                if isinstance(annotations, Mapping)
                else getattr(annotations, name, None)
            )
            if value is not None:
                return value
        return None

    destructive = hint("destructive_hint", "destructiveHint")
    read_only = hint("read_only_hint", "readOnlyHint")
    return destructive is True or read_only is False


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


def _choice(tool: Any, argument: str, constants: dict[str, Any]) -> ToolChoice:
    _check_arguments(tool, argument, constants)
    schema = getattr(tool, "output_schema", None)
    return ToolChoice(
        name=str(tool.name),
        argument=argument,
        output_schema=schema if isinstance(schema, Mapping) else None,
        arguments=constants,
        takes_address=_takes_address(tool, argument),
    )


def _check_arguments(tool: Any, argument: str, constants: Mapping[str, Any]) -> None:
    """ToolProblem unless the constant arguments fit the tool's input schema: known
    parameters of the declared types (and values), not the query's, and with the query
    every required parameter given."""
    name = result_text(str(getattr(tool, "name", "")))[:64]
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
