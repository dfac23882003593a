"""The MCP server's settings: who may call ``/mcp`` (``FATHOM_MCP_TOKEN``: each bearer token
is a principal; ``FATHOM_MCP_SLACK_IDENTITY``: the Slackbot MCP client of Fathom's Slack app,
each Slack user a caller) and which ``Origin`` and ``Host`` headers it answers
(``FATHOM_MCP_ALLOWED_ORIGINS``, ``FATHOM_MCP_ALLOWED_HOSTS``).

A principal is who calls: its runs are ``mcp:<principal>:...`` threads, its requester key
``mcp:<principal>:<principal>`` counts against the per-user quotas, and its internal sources
are scoped as a channel's (``mcp:<principal>`` in ``FATHOM_MCP_CONFIG``'s ``channels``).
``fathom mcp`` (stdio) has one principal, :data:`LOCAL`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field, field_validator
from pydantic_settings import NoDecode

from core.config import CommaList, ConfigError, EnvSettings, env, load, split_commas

#: The principal of ``fathom mcp`` (stdio): the person at this machine.
LOCAL = "local"
#: What a principal id may be: it becomes part of thread keys and requester keys.
PRINCIPAL = re.compile(r"[a-z0-9_-]{1,64}")
#: The shortest token accepted: 32 characters (``openssl rand -hex 32`` gives 64).
MIN_TOKEN_LENGTH = 32
#: The ``Host`` values answered when ``FATHOM_MCP_ALLOWED_HOSTS`` is unset: this machine's
#: loopback names, on any port (a public name must be listed).
LOOPBACK_HOSTS = ("127.0.0.1", "127.0.0.1:*", "localhost", "localhost:*", "[::1]", "[::1]:*")
_TOKEN_CHARACTERS = re.compile(r"[\x21-\x7e]+")


@dataclass(frozen=True)
class McpToken:
    """One bearer token and the principal it stands for."""

    principal: str
    token: str

    def __repr__(self) -> str:  # never the token itself (settings end up in tracebacks)
        return f"McpToken(principal={self.principal!r}, token=<{len(self.token)} characters>)"


def parse_tokens(value: object) -> object:
    """``alice=<token>,bob=<token>`` -> one :class:`McpToken` each; ``ValueError`` (one line,
    never a token in it) for a pair that is not ``principal=token``, a principal id that is
    not ``[a-z0-9_-]{1,64}`` or comes twice, a token shorter than 32 characters, with spaces
    or control characters, or given to two principals."""
    if not isinstance(value, str):
        return value
    tokens: list[McpToken] = []
    for n, pair in enumerate((part.strip() for part in value.split(",")), start=1):
        if not pair:
            continue
        principal, sign, token = pair.partition("=")
        principal, token = principal.strip(), token.strip()
        if not sign or not principal or not token:
            raise ValueError(f"pair {n} is not principal=token")
        if not PRINCIPAL.fullmatch(principal):
            raise ValueError(f"principal {principal[:64]!r} is not [a-z0-9_-]{{1,64}}")
        if principal == LOCAL:
            raise ValueError(f"principal {LOCAL!r} is fathom mcp's (stdio): choose another name")
        if len(token) < MIN_TOKEN_LENGTH:
            raise ValueError(
                f"{principal}'s token is shorter than {MIN_TOKEN_LENGTH} characters "
                "(make one with `openssl rand -hex 32`)"
            )
        if not _TOKEN_CHARACTERS.fullmatch(token):
            raise ValueError(f"{principal}'s token has spaces or control characters")
        if any(each.principal == principal for each in tokens):
            raise ValueError(f"principal {principal!r} is given twice")
        if any(each.token == token for each in tokens):
            raise ValueError(f"{principal}'s token is also another principal's")
        tokens.append(McpToken(principal, token))
    return tokens


class McpSettings(EnvSettings):
    """``/mcp``'s tokens and the headers it accepts."""

    #: Comma-separated ``principal=token`` pairs; empty: no ``/mcp`` (404).
    tokens: Annotated[list[McpToken], NoDecode] = Field(
        default_factory=list, validation_alias=env("FATHOM_MCP_TOKEN")
    )
    #: ``Origin`` values answered (``https://app.example.com``; ``http://localhost:*`` for any
    #: port); a request carrying any other ``Origin`` is refused with 403. Empty: a request
    #: with an ``Origin`` header (a browser's) is always refused.
    allowed_origins: CommaList = Field(
        default_factory=list, validation_alias=env("FATHOM_MCP_ALLOWED_ORIGINS")
    )
    #: ``Host`` values answered (``fathom.example.com``, ``fathom.example.com:*``); ``*``
    #: answers any (behind a proxy that checks it). Default: :data:`LOOPBACK_HOSTS`.
    allowed_hosts: CommaList = Field(
        default_factory=lambda: list(LOOPBACK_HOSTS),
        validation_alias=env("FATHOM_MCP_ALLOWED_HOSTS"),
    )

    #: Serve the Slackbot MCP client of the Slack app whose ``SLACK_SIGNING_SECRET`` Fathom
    #: has (``auth_type: slack_identity_auth``): a request signed with that secret is served
    #: without a token, each Slack user its own caller (``bots.mcp.callers``).
    slack_identity: bool = Field(False, validation_alias=env("FATHOM_MCP_SLACK_IDENTITY"))

    _tokens = field_validator("tokens", mode="before")(parse_tokens)
    _lists = field_validator("allowed_origins", "allowed_hosts", mode="before")(split_commas)

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, values: list[str]) -> list[str]:
        for value in values:
            if not re.fullmatch(r"https?://[^/\s]+", value):
                raise ValueError(f"{value!r} is not an origin (scheme://host[:port], no path)")
        return values

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts(cls, values: list[str]) -> list[str]:
        for value in values:
            if value != "*" and not re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+(:\*)?", value):
                raise ValueError(f"{value!r} is not a host name (host[:port], host:*, or *)")
        return values or list(LOOPBACK_HOSTS)

    @property
    def enabled(self) -> bool:
        """Whether ``fathom serve`` serves ``/mcp`` (a token is configured, or Slack's signed
        identity is taken)."""
        return bool(self.tokens) or self.slack_identity

    def secret_patterns(self) -> tuple[str, ...]:
        """Each token, for the log redaction (a token has no shape to recognise it by)."""
        return tuple(re.escape(each.token) for each in self.tokens)


def token_patterns() -> tuple[str, ...]:
    """The configured tokens' patterns (:meth:`McpSettings.secret_patterns`), for the log
    redaction of every command; none when the setting is malformed (the command that serves
    ``/mcp`` stops on it with one line that does not repeat it)."""
    try:
        return load(McpSettings).secret_patterns()
    except ConfigError:
        return ()
