"""Which tool of an MCP server Fathom calls, decided once when it connects.

The configured ``tool``, or else the server's only tool whose input has exactly one required
string parameter (the query goes there, or to the configured ``argument``). Anything else is a
start-up problem that lists the server's tools, so the operator can name one. The model never
chooses: Fathom only ever calls this tool with ``{argument: query}``.

Tools are read by their attributes (``name``, ``input_schema``, ``output_schema``): this
module does not import the SDK.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.search.base import result_text

#: At most this many tool names are listed in a problem.
MAX_LISTED = 12


class ToolProblem(Exception):
    """The server offers no tool Fathom can call (the message lists its tools)."""


@dataclass(frozen=True)
class ToolChoice:
    name: str
    #: The parameter that receives the query.
    argument: str
    #: The tool's output schema, when it declares one (it says where results stand).
    output_schema: Mapping[str, Any] | None = None


def resolve_tool(tools: Sequence[Any], tool: str | None, argument: str | None) -> ToolChoice:
    """The tool to call (see the module); ToolProblem when there is none or more than one."""
    if tool is not None:
        found = next((t for t in tools if getattr(t, "name", None) == tool), None)
        if found is None:
            raise ToolProblem(f"has no tool {tool!r}; its tools: {listing(tools)}")
        parameter = argument or query_parameter(found)
        if parameter is None:
            raise ToolProblem(
                f"tool {tool!r} has no single required string parameter; "
                "set fathom.argument to the one that takes the query"
            )
        return _choice(found, parameter)
    if argument is not None:
        candidates = [t for t in tools if _string_property(t, argument)]
    else:
        candidates = [t for t in tools if query_parameter(t) is not None]
    if len(candidates) == 1:
        chosen = candidates[0]
        parameter = argument or query_parameter(chosen)
        assert parameter is not None
        return _choice(chosen, parameter)
    if not candidates:
        what = (
            f"a string parameter {argument!r}"
            if argument
            else "exactly one required string parameter"
        )
        raise ToolProblem(
            f"no tool takes {what}; set fathom.tool to one of its tools: {listing(tools)}"
        )
    raise ToolProblem(
        f"{len(candidates)} tools could take the query ({listing(candidates)}); "
        "set fathom.tool to the one to call"
    )


def query_parameter(tool: Any) -> str | None:
    """The name of the tool's one required parameter when it is a string, else None."""
    schema = getattr(tool, "input_schema", None)
    if not isinstance(schema, Mapping):
        return None
    required = schema.get("required")
    if not isinstance(required, list) or len(required) != 1 or not isinstance(required[0], str):
        return None
    return required[0] if _string_property(tool, required[0]) else None


def listing(tools: Sequence[Any]) -> str:
    """The tools' names, inert and at most :data:`MAX_LISTED` of them ('none' for none)."""
    names = [result_text(getattr(t, "name", ""))[:64] or "?" for t in tools]
    if not names:
        return "none"
    shown = ", ".join(names[:MAX_LISTED])
    return shown if len(names) <= MAX_LISTED else f"{shown} and {len(names) - MAX_LISTED} more"


def _string_property(tool: Any, name: str) -> bool:
    schema = getattr(tool, "input_schema", None)
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    spec = properties.get(name) if isinstance(properties, Mapping) else None
    if not isinstance(spec, Mapping):
        return False
    kind = spec.get("type")
    return kind == "string" or (isinstance(kind, list) and "string" in kind)


def _choice(tool: Any, argument: str) -> ToolChoice:
    schema = getattr(tool, "output_schema", None)
    return ToolChoice(
        name=str(tool.name),
        argument=argument,
        output_schema=schema if isinstance(schema, Mapping) else None,
    )
