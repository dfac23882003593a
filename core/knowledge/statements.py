"""Tools that run what they are sent, and the texts such a tool may be sent.

Fathom sends an MCP tool the planner's search topic: model-written text that a web page can
steer. A tool that executes what it receives (SQL or another query language, a shell, code, a
command) would run it, so such a tool is recognised by how it describes itself
(:func:`executes`: its name, its description, its input schema) and never chosen by itself; it
is called only when the operator names it and opts in (``fathom.statements: "read-only"``),
and then only with texts :func:`statement_refusal` finds no reason to refuse.

That check is lexical and strict on purpose: a statement tool cannot search with words anyway,
and what matters is that no statement other than a read reaches it, in any dialect. A text is
refused when it holds a line break or a control character, a comment marker (``--``, ``/*``,
``*/``, ``#``: a comment can hide a keyword from any scanner), a statement separator with more
after it, a word that starts or is part of a statement that changes something (``DELETE``,
``DROP``, ``UPDATE``, ``INSERT``, ``ALTER``, ``ATTACH``, ``COPY``, ``PRAGMA``, ``SET``,
``INTO``...; Cypher's ``CREATE``, ``MERGE``, ``SET``, ``REMOVE``), a call of a function that is
not a plain one (``pg_terminate_backend(...)``, ``read_csv(...)``, ``load_extension(...)``),
or a quoted file name or address (DuckDB reads ``FROM 'data.csv'``). Texts are compared after
Unicode normalisation (NFKC), so full-width letters and punctuation are caught too. The real
guarantee stays the server's own: a read-only database user (the README says so).

This module reads tools by their attributes (``name``, ``description``, ``input_schema``,
``annotations``) and never imports the SDK.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from core.knowledge.results import short_text
from core.words.reasons import Reason

#: At most this much of a description or a parameter's description is read.
MAX_DESCRIPTION = 2000
#: At most this much of a description is quoted in a problem.
QUOTED = 80


class Executes(StrEnum):
    """What a tool runs."""

    #: SQL or another query language (Cypher, SPARQL, GraphQL, PromQL...).
    STATEMENTS = "statements"
    #: A shell, code or a command.
    CODE = "code"


@dataclass(frozen=True)
class Execution:
    """A tool that executes what it is sent: what it runs, and what says so (``evidence``:
    "its description says ..."), for a problem line."""

    runs: Executes
    evidence: str

    @property
    def said(self) -> str:
        """``runs statements (SQL or another query language; its name says so)``."""
        if self.runs is Executes.CODE:
            return f"runs shell commands or code ({self.evidence})"
        return f"runs statements (SQL or another query language; {self.evidence})"


#: Query languages: a tool that names one runs its statements.
_LANGUAGES = frozenset(
    {"sql", "tsql", "psql", "plsql", "cypher", "sparql", "graphql", "gql", "promql", "logql",
     "kql", "hql", "cql", "n1ql", "ksql", "influxql", "flux", "xquery", "jsonata"}
)  # fmt: skip
#: Words that name a shell or a code runner by themselves.
_SHELLS = frozenset(
    {"shell", "bash", "sh", "zsh", "powershell", "pwsh", "terminal", "repl", "subprocess"}
)  # fmt: skip
#: Verbs of running something.
_RUN_VERBS = frozenset({"execute", "exec", "eval", "evaluate", "run", "invoke"})
#: What is run: statements...
_STATEMENT_NOUNS = frozenset({"query", "queries", "statement", "statements", "sql"})
#: ...or code.
_CODE_NOUNS = frozenset(
    {"code", "script", "scripts", "command", "commands", "cmd", "python", "javascript", "js",
     "ruby", "program", "snippet"}
)  # fmt: skip
#: Parameter names that take statements, and those that take code.
_STATEMENT_PARAMETERS = frozenset(
    {"sql", "statement", "statements", "cypher", "sparql", "graphql", "gql", "promql"}
)  # fmt: skip
_CODE_PARAMETERS = frozenset({"code", "command", "cmd", "script", "shell", "program", "source"})

_WORD = re.compile(r"[a-z]+|[A-Z][a-z]*|\d+")
_RUN_PHRASE = re.compile(
    r"\b(?:execut\w*|exec|runs?|running|evaluat\w*|eval|invok\w*)\b"
    r"(?:\W+(?!search\b)\w+){0,4}?\W+"
    r"(?P<noun>sql|quer(?:y|ies)|statements?|commands?|code|scripts?|programs?|snippets?)\b",
    re.IGNORECASE,
)
_LANGUAGE_NAMED = re.compile(
    r"\b(?:sql|cypher|sparql|graphql|promql|logql|kql|select (?:statements?|quer(?:y|ies)))\b",
    re.IGNORECASE,
)
_SHELL_NAMED = re.compile(
    r"\b(?:shell|bash|powershell|terminal|command[- ]line|subprocess)\b", re.IGNORECASE
)
_STATEMENT_TO_RUN = re.compile(
    r"\b(?:quer(?:y|ies)|statements?|commands?|code)\s+to\s+(?:execute|run|evaluate)\b",
    re.IGNORECASE,
)


def executes(tool: Any) -> Execution | None:
    """Whether ``tool`` executes what it is sent, by its name (``execute_query``,
    ``run_sql``, ``read_neo4j_cypher``, ``shell``), its description ("Execute a query on the
    DuckDB database", "Run a shell command") or its input schema (a ``sql`` or ``command``
    parameter; a parameter described as "SQL query to execute"); None when nothing says so."""
    name = str(getattr(tool, "name", "") or "")
    words = name_words(name)
    runs = _runs_by_words(words)
    if runs is not None:
        return Execution(runs, f"its name {_quote(name)} says so")
    description = _text(getattr(tool, "description", None))
    runs = _runs_by_text(description)
    if runs is not None:
        return Execution(runs, f"its description says {_quote(description)}")
    for parameter, spec in _properties(tool).items():
        key = str(parameter).lower()
        if key in _STATEMENT_PARAMETERS:
            return Execution(Executes.STATEMENTS, f"its parameter {_quote(parameter)} takes them")
        if key in _CODE_PARAMETERS:
            return Execution(Executes.CODE, f"its parameter {_quote(parameter)} takes them")
        said = _text(spec.get("description")) if isinstance(spec, Mapping) else ""
        runs = _runs_by_text(said)
        if runs is not None or _STATEMENT_TO_RUN.search(said):
            return Execution(
                runs or Executes.STATEMENTS,
                f"its parameter {_quote(parameter)} is described as {_quote(said)}",
            )
    return None


def name_words(name: str) -> list[str]:
    """A tool name's words, lower case: ``execute_query``, ``read-query`` and
    ``runSQLQuery`` give ``[execute, query]``, ``[read, query]``, ``[run, sql, query]``."""
    words: list[str] = []
    for part in re.split(r"[^A-Za-z0-9]+", name):
        if part.isupper():
            words.append(part.lower())
            continue
        words.extend(match.lower() for match in _WORD.findall(part))
    return words


def _runs_by_words(words: list[str]) -> Executes | None:
    found = set(words)
    if found & _LANGUAGES:
        return Executes.STATEMENTS
    if found & _SHELLS:
        return Executes.CODE
    verbs = found & _RUN_VERBS
    if not verbs:
        return None
    if found & _STATEMENT_NOUNS:
        return Executes.STATEMENTS
    if found & _CODE_NOUNS or verbs - {"run", "invoke"}:
        return Executes.CODE  # (``exec``, ``eval``, ``execute``: it runs something)
    return None


def _runs_by_text(text: str) -> Executes | None:
    if not text:
        return None
    match = _RUN_PHRASE.search(text)
    if match is not None:
        noun = match.group("noun").lower()
        return (
            Executes.STATEMENTS
            if noun.startswith(("sql", "quer", "statement"))
            else (Executes.CODE)
        )
    if _LANGUAGE_NAMED.search(text):
        return Executes.STATEMENTS
    if _SHELL_NAMED.search(text):
        return Executes.CODE
    return None


# --- what a tool that runs statements may be sent -----------------------------------------

#: Words of statements that change something, in SQL dialects (SQLite, DuckDB, PostgreSQL,
#: MySQL, SQL Server, Oracle) and Cypher, and words that make a read write (``SELECT ...
#: INTO``, ``EXPLAIN ANALYZE`` runs the statement, ``FOR UPDATE`` locks).
WRITE_WORDS = frozenset(
    {"delete", "drop", "update", "insert", "alter", "attach", "detach", "copy", "pragma",
     "create", "truncate", "replace", "merge", "upsert", "grant", "revoke", "deny", "exec",
     "execute", "call", "load", "install", "vacuum", "reindex", "rename", "set", "reset",
     "lock", "unlock", "commit", "rollback", "savepoint", "begin", "start", "declare",
     "prepare", "deallocate", "handler", "import", "export", "checkpoint", "shutdown", "kill",
     "do", "use", "into", "outfile", "dumpfile", "remove", "foreach", "optimize", "flush",
     "purge", "analyze", "analyse", "cluster", "comment", "discard", "listen", "notify",
     "refresh", "reassign", "security", "restore", "backup", "dbcc", "go"}
)  # fmt: skip
#: Words followed by ``(`` in a read that are no call of a function with effects: SQL's own
#: words, and plain functions of every dialect.
PLAIN_CALLS = frozenset(
    {"in", "exists", "any", "all", "some", "values", "not", "and", "or", "as", "on", "using",
     "over", "filter", "within", "from", "where", "join", "select", "with", "by", "when",
     "then", "else", "case", "like", "between", "is", "count", "sum", "avg", "min", "max",
     "lower", "upper", "length", "char_length", "coalesce", "nullif", "cast", "round", "abs",
     "substr", "substring", "trim", "ltrim", "rtrim", "concat", "date", "extract", "year",
     "month", "day", "ifnull", "instr", "position", "strftime", "group_concat", "string_agg"}
)  # fmt: skip
#: Prefixes of SQL Server's system procedures, which run as a batch's first word, without
#: ``EXEC`` (``xp_cmdshell 'rm ...'``).
_PROCEDURES = ("xp_", "sp_")
_LINE_BREAK_OR_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
_COMMENT = re.compile(r"--|/\*|\*/|#")
_CALL = re.compile(r"([a-z_][a-z0-9_$]*)\s*\(")
_QUOTED = re.compile(r"'([^']*)'|\"([^\"]*)\"|`([^`]*)`")
_FILE_OR_ADDRESS = re.compile(
    r"^\s*(?:[a-z][a-z0-9+.-]*:|[~/\\.]|[a-z]:\\)|\.(?:csv|tsv|json|jsonl|ndjson|parquet|db|"
    r"sqlite\d?|duckdb|xlsx?|txt|log|gz|zst|arrow|avro|orc)\b",
    re.IGNORECASE,
)


def statement_refusal(text: str) -> Reason | None:
    """Why ``text`` may not be sent to a tool that runs statements (see the module), or None
    when it holds no statement other than a read."""
    normal = unicodedata.normalize("NFKC", text)
    if _LINE_BREAK_OR_CONTROL.search(normal):
        return Reason("it holds a line break or a control character", "它含有换行或控制字符")
    if _COMMENT.search(normal):
        return Reason(
            "it holds a comment marker (--, /*, */ or #), which can hide a statement",
            "它含有注释标记（--、/*、*/ 或 #），注释可以藏起语句",
        )
    if ";" in normal.rstrip().rstrip(";"):
        return Reason("it holds several statements (;)", "它含有多条语句（;）")
    lower = normal.casefold()
    words = re.findall(r"[a-z_]+", lower)
    procedure = next((word for word in words if word.startswith(_PROCEDURES)), None)
    if procedure is not None:
        return Reason(f"it calls a procedure ({procedure})", f"它调用了存储过程（{procedure}）")
    written = [word for word in words if word in WRITE_WORDS]
    if written:
        word = written[0].upper()
        return Reason(
            f"it reads as a statement that is not a read ({word})",
            f"它读起来像一条不是读取的语句（{word}）",
        )
    for call in _CALL.finditer(lower):
        if call.group(1) not in PLAIN_CALLS:
            return Reason(
                f"it calls a function ({call.group(1)})", f"它调用了函数（{call.group(1)}）"
            )
    for quoted in _QUOTED.finditer(normal):
        literal = next(group for group in quoted.groups() if group is not None)
        if _FILE_OR_ADDRESS.search(literal):
            return Reason("it names a file or an address", "它指向一个文件或地址")
    return None


# --- helpers -------------------------------------------------------------------------------


def _properties(tool: Any) -> Mapping[str, Any]:
    schema = getattr(tool, "input_schema", None)
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    return properties if isinstance(properties, Mapping) else {}


def _text(value: object) -> str:
    return " ".join(value[:MAX_DESCRIPTION].split()) if isinstance(value, str) else ""


def _quote(text: object) -> str:
    """Outside words for a problem line: on one line, inert, at most :data:`QUOTED`."""
    return f'"{short_text(str(text), QUOTED)}"'
