"""``FATHOM_MCP_CONFIG``: the MCP servers Fathom searches, in the ``mcpServers`` JSON shape every
MCP client uses (Claude Desktop, Claude Code, Cursor; VS Code's top-level ``servers`` too), so a
block copied from one of them works.

Each entry starts a stdio server (``command``, ``args``, ``env``, ``cwd``) or reaches a
Streamable HTTP one (``url``, ``headers``); Fathom's own options sit under ``fathom``
(``tool``, ``argument``, ``arguments``, ``results``, ``channels``, ``statements``). Other
clients' keys (``type``, ``timeout``, ``autoApprove``, ...) are ignored, except an SSE
``type``, which is refused.
``${VAR}``, ``${VAR:-default}`` (and VS Code's ``${env:VAR}``) in ``command``, ``args``,
``cwd``, ``env`` values, ``url``, ``headers`` values and ``fathom.arguments`` string values come
from Fathom's environment.

A file that cannot be read, is not JSON or has no ``mcpServers`` object is one
:class:`~core.config.ConfigError` line; a bad entry only takes its own server down (one line
in :attr:`KnowledgeConfig.problems`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.config import ConfigError

Transport = Literal["stdio", "http"]

#: What a masked value reads as.
MASK = "****"
#: ``${VAR}``, ``${VAR:-default}``, ``${env:VAR}``.
_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_ANY_VARIABLE = re.compile(r"\$\{[^}]*\}")
#: A channel prefix: ``platform[:workspace[:channel]]``, no empty part, no whitespace.
_CHANNEL = re.compile(r"^[^:\s]+(?::[^:\s]+){0,2}$")
#: At most this many characters of a file are read (a config is a few kB).
MAX_CONFIG_BYTES = 1024 * 1024


class ServerSpec(BaseModel):
    """One usable MCP server of the configuration (variables already expanded)."""

    model_config = ConfigDict(frozen=True)

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: The tool called with each query (None: the only one taking one required string).
    tool: str | None = None
    #: The tool's parameter that receives the query (None: its one required string).
    argument: str | None = None
    #: Constant arguments sent with every call (``repo_path``, ``project``...), checked
    #: against the tool's input schema when it connects.
    arguments: dict[str, Any] = Field(default_factory=dict)
    #: How many results of each call are used.
    results: int = Field(default=5, ge=1, le=20)
    #: Thread-key prefixes that may use the server (empty: the console only).
    channels: tuple[str, ...] = ()
    #: ``"read-only"``: the named tool runs statements and may be sent reads only
    #: (``core.knowledge.statements``); None: a tool that runs statements is refused.
    statements: Literal["read-only"] | None = None

    @property
    def transport(self) -> Transport:
        return "stdio" if self.command is not None else "http"

    def masked(self) -> dict[str, Any]:
        """The entry as ``fathom sources`` shows it: env and header values are ``****``."""
        shown: dict[str, Any] = {"name": self.name, "transport": self.transport}
        if self.command is not None:
            shown.update(command=self.command, args=list(self.args), cwd=self.cwd)
            shown["env"] = {key: MASK for key in self.env}
        else:
            shown["url"] = self.url
            shown["headers"] = {key: MASK for key in self.headers}
        shown.update(
            tool=self.tool,
            argument=self.argument,
            arguments={key: MASK for key in self.arguments},
            results=self.results,
            channels=self.channels,
            statements=self.statements,
        )
        return shown


@dataclass(frozen=True)
class KnowledgeConfig:
    """The servers of a configuration file: those that can be used, and why the others
    cannot (server name -> one line naming it)."""

    servers: tuple[ServerSpec, ...] = ()
    problems: dict[str, str] = field(default_factory=dict)


# --- the file's shape (pydantic at the edge) ----------------------------------------------


class _FathomOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    tool: str | None = Field(default=None, min_length=1)
    argument: str | None = Field(default=None, min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)
    results: int = Field(default=5, ge=1, le=20)
    channels: list[str] = Field(default_factory=list)
    statements: Literal["read-only"] | None = None

    @field_validator("channels")
    @classmethod
    def _prefixes(cls, channels: list[str]) -> list[str]:
        for channel in channels:
            if not _CHANNEL.match(channel):
                raise ValueError(
                    f"channel {channel!r} is not platform[:workspace[:channel]] "
                    "(like slack:T0001:C0001, slack:T0001, feishu or cli)"
                )
        return channels


class _Entry(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = Field(default=None, min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)
    type: str | None = None
    transport: str | None = None  # (some clients' spelling of ``type``)
    disabled: bool = False
    fathom: _FathomOptions | None = None


def load_knowledge_config(path: str) -> KnowledgeConfig:
    """The servers of the ``mcpServers`` file at ``path`` (see the module); ConfigError (one
    line) when the file cannot be used at all."""
    where = f"FATHOM_MCP_CONFIG={path}"
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{where}: larger than {MAX_CONFIG_BYTES // 1024} kB")
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{where}: not JSON ({_one_line(str(exc))})") from None
    if not isinstance(document, dict):
        raise ConfigError(f'{where}: expected an object like {{"mcpServers": {{...}}}}')
    servers = document.get("mcpServers", document.get("servers"))
    if not isinstance(servers, dict):
        raise ConfigError(f'{where}: expected an object "mcpServers" naming each server')
    return parse_servers(servers, os.environ)


def parse_servers(servers: Mapping[str, object], environ: Mapping[str, str]) -> KnowledgeConfig:
    """The ``mcpServers`` object's entries, variables expanded from ``environ``."""
    specs: list[ServerSpec] = []
    problems: dict[str, str] = {}
    for name, raw in servers.items():
        try:
            spec = _server(name, raw, environ)
        except _Problem as problem:
            problems[name] = f"MCP server {name!r}: {problem}"
            continue
        if spec is not None:
            specs.append(spec)
    return KnowledgeConfig(tuple(specs), problems)


class _Problem(Exception):
    """Why one entry cannot be used."""


def _server(name: str, raw: object, environ: Mapping[str, str]) -> ServerSpec | None:
    if not name.strip() or len(name) > 64 or not name.isprintable():
        raise _Problem("a server name is 1 to 64 printable characters")
    if not isinstance(raw, dict):
        raise _Problem("expected an object with a command or a url")
    try:
        entry = _Entry.model_validate(raw)
    except ValidationError as exc:
        raise _Problem(_validation_line(exc)) from None
    if entry.disabled:
        return None
    kind = (entry.type or entry.transport or "").strip().lower()
    if kind == "sse":
        raise _Problem("SSE transport is not supported; use Streamable HTTP")
    if entry.command is None and entry.url is None:
        raise _Problem("needs a command (a stdio server) or a url (a Streamable HTTP server)")
    if entry.command is not None and entry.url is not None:
        raise _Problem("has both a command and a url; give one")

    def expand(value: str, what: str) -> str:
        return _expand(value, what, environ)

    if entry.url is not None:
        url = expand(entry.url, "url").strip()
        if not re.match(r"^https?://[^\s/]+", url, re.IGNORECASE):
            raise _Problem("url must be an http:// or https:// address")
        return ServerSpec(
            name=name,
            url=url,
            headers={k: expand(v, f"headers.{k}") for k, v in entry.headers.items()},
            **_options(entry.fathom or _FathomOptions(), expand),
        )
    assert entry.command is not None
    return ServerSpec(
        name=name,
        command=expand(entry.command, "command"),
        args=tuple(expand(arg, f"args[{i}]") for i, arg in enumerate(entry.args)),
        env={k: expand(v, f"env.{k}") for k, v in entry.env.items()},
        cwd=None if entry.cwd is None else expand(entry.cwd, "cwd"),
        **_options(entry.fathom or _FathomOptions(), expand),
    )


def _options(options: _FathomOptions, expand: Callable[[str, str], str]) -> dict[str, Any]:
    return {
        "tool": options.tool,
        "argument": options.argument,
        "arguments": {
            key: expand(value, f"fathom.arguments.{key}") if isinstance(value, str) else value
            for key, value in options.arguments.items()
        },
        "results": options.results,
        "channels": tuple(dict.fromkeys(options.channels)),
        "statements": options.statements,
    }


def _expand(value: str, what: str, environ: Mapping[str, str]) -> str:
    """``value`` with its variables replaced; a variable that is not set and has no default is
    a problem naming it (never its value)."""

    def replace(match: re.Match[str]) -> str:
        variable, default = match.group(1), match.group(2)
        found = environ.get(variable)
        if found is not None and (found or default is None):
            return found
        if default is not None:
            return default
        raise _Problem(f"{what} uses ${{{variable}}}, which is not set")

    expanded = _VARIABLE.sub(replace, value)
    leftover = _ANY_VARIABLE.search(_VARIABLE.sub("", value))
    if leftover:
        raise _Problem(f"{what}: cannot expand {leftover.group(0)} (only ${{VAR}} and ${{VAR:-x}})")
    return expanded


def _validation_line(exc: ValidationError) -> str:
    """The first problem pydantic found, as ``fathom.results: ...`` (never the given value:
    it may be a secret)."""
    error = exc.errors(include_url=False, include_input=False)[0]
    where = ".".join(str(part) for part in error["loc"]) or "entry"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown option"
    return f"{where}: {_one_line(message)}"


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
