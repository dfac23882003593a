"""A fake Slack Web API (plus upload and response_url targets) and signed-request builders.

The real `slack_sdk` AsyncWebClient and Bolt talk to it over HTTP, so the adapter is tested with
the same encodings (JSON bodies, form bodies, query params), error shapes, 429s and block limits
that production Slack produces. The inbound helpers build slash commands and events signed
exactly as Slack signs them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Self
from urllib.parse import parse_qsl, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from bots.slack.oauth import BOT_SCOPES
from tests.fakes.server import BackgroundServer, broken_body

MAX_TEXT = 40_000
MAX_BLOCKS = 50
MAX_MARKDOWN = 12_000  # cumulative over all `markdown` blocks of one message
SECTION_CHARS = 3_000  # a section block's text
BUTTON_TEXT_CHARS = 75  # a button's label
PLAN_KINDS = frozenset({"plan", "task_card"})
TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})
MAX_PLAN_TASKS = 50
MAX_LOADING_MESSAGES = 10
MAX_SUGGESTED_PROMPTS = 4
#: ``status`` of ``agents.sessions.setStatus`` ("Acceptable values").
SESSION_STATUSES = frozenset({"active", "processing", "suspended", "closed"})


@dataclass(frozen=True)
class SlackCall:
    method: str
    params: dict[str, Any]
    token: str | None
    time: float = field(default_factory=time.time)


@dataclass(frozen=True)
class FileRequest:
    """One request for a file's contents (``/files-pri/...``): its path and credential."""

    path: str
    authorization: str | None
    time: float = field(default_factory=time.time)


#: What Slack answers a file request whose token may not read the file: its sign-in page,
#: with HTTP 200 (a browser would show it).
SIGN_IN_PAGE = (
    '<!DOCTYPE html><html lang="en-US"><head><title>Slack</title></head><body>'
    '<h1>Sign in to Fathom Fake</h1><form action="/signin"><input name="email">'
    "</form></body></html>"
)
#: The failure queue of file requests (``fail_next(FILES, status=500)``).
FILES = "files-pri"


@dataclass
class _Failure:
    status: int
    retry_after: int
    error: str | None
    remaining: int
    body: str | None = None  # a broken body (tests.fakes.server.BROKEN_BODIES)


class SlackError(Exception):
    """Raised by method handlers; becomes `{"ok": false, "error": code}` with HTTP 200."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _check_message(params: dict[str, Any], *, plans: bool = True) -> None:
    """Slack's own limits, so tests catch reports that would be rejected in production
    (``plans``: False for a workspace that does not take plan and task card blocks)."""
    if len(str(params.get("text") or "")) > MAX_TEXT:
        raise SlackError("msg_too_long")
    if "blocks" not in params:
        return
    blocks = params["blocks"]
    if isinstance(blocks, str):
        try:
            blocks = params["blocks"] = json.loads(blocks)
        except ValueError:
            raise SlackError("invalid_blocks") from None
    if not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS:
        raise SlackError("invalid_blocks")
    if not all(isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks):
        raise SlackError("invalid_blocks")
    markdown = sum(len(str(b.get("text", ""))) for b in blocks if b["type"] == "markdown")
    if markdown > MAX_MARKDOWN:
        raise SlackError("invalid_blocks")
    block_ids = [b["block_id"] for b in blocks if "block_id" in b]
    action_ids = [
        e.get("action_id") for b in blocks if b["type"] == "actions" for e in b.get("elements", [])
    ]
    if len(set(block_ids)) < len(block_ids) or len(set(action_ids)) < len(action_ids):
        raise SlackError("invalid_blocks")  # ids must be unique within a message
    for block in blocks:
        if not plans and block["type"] in PLAN_KINDS:
            raise SlackError("invalid_blocks")
        if not _block_is_valid(block):
            raise SlackError("invalid_blocks")


def _text_object(value: Any, limit: int, kinds: tuple[str, ...]) -> bool:
    return (
        isinstance(value, dict)
        and value.get("type") in kinds
        and isinstance(value.get("text"), str)
        and 0 < len(value["text"]) <= limit
    )


def is_report(message: dict[str, Any]) -> bool:
    """A message (or ``chat.postMessage`` params) of a report: it has a ``markdown`` block
    (progress messages carry a section and buttons)."""
    blocks = message.get("blocks")
    return isinstance(blocks, list) and any(
        isinstance(b, dict) and b.get("type") == "markdown" for b in blocks
    )


def _block_is_valid(block: dict[str, Any]) -> bool:
    """The Block Kit rules Slack enforces on the blocks Fathom sends (section, actions with
    buttons, markdown; the limits of slack_sdk's block models)."""
    block_id = block.get("block_id")
    if block_id is not None and not (isinstance(block_id, str) and 0 < len(block_id) <= 255):
        return False
    kind = block["type"]
    if kind == "markdown":
        return isinstance(block.get("text"), str)
    if kind == "section":
        return _text_object(block.get("text"), SECTION_CHARS, ("mrkdwn", "plain_text"))
    if kind == "actions":
        elements = block.get("elements")
        if not isinstance(elements, list) or not 0 < len(elements) <= 25:
            return False
        return all(_button_is_valid(e) for e in elements)
    if kind == "plan":
        return _plan_is_valid(block)
    if kind == "task_card":
        return task_card_is_valid(block)
    return True  # other kinds are not checked here


def _rich_text_is_valid(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("type") == "rich_text"
        and isinstance(value.get("elements"), list)
        and len(value["elements"]) > 0
        and all(isinstance(e, dict) and isinstance(e.get("type"), str) for e in value["elements"])
    )


def _url_source_is_valid(source: Any) -> bool:
    return (
        isinstance(source, dict)
        and source.get("type") == "url"
        and isinstance(source.get("url"), str)
        and source["url"].startswith(("https://", "http://"))
        and isinstance(source.get("text"), str)
        and 0 < len(source["text"])
    )


def task_card_is_valid(task: Any) -> bool:
    """A ``task_card`` (a block, or one task of a plan, where its ``type`` may be left out):
    an id, a plain-text title, one of the four statuses, rich-text details and output, URL
    sources (Block Kit reference, "Task card block")."""
    if not isinstance(task, dict) or task.get("type", "task_card") != "task_card":
        return False
    task_id, title = task.get("task_id"), task.get("title")
    if not (isinstance(task_id, str) and task_id and isinstance(title, str) and title.strip()):
        return False
    if task.get("status", "pending") not in TASK_STATUSES:
        return False
    for key in ("details", "output"):
        if key in task and not _rich_text_is_valid(task[key]):
            return False
    sources = task.get("sources", [])
    return isinstance(sources, list) and all(_url_source_is_valid(s) for s in sources)


def _plan_is_valid(block: dict[str, Any]) -> bool:
    """A ``plan``: a plain-text title and task cards with unique ids (Block Kit reference,
    "Plan block")."""
    title, tasks = block.get("title"), block.get("tasks", [])
    if not (isinstance(title, str) and title.strip()) or not isinstance(tasks, list):
        return False
    if len(tasks) > MAX_PLAN_TASKS or not all(task_card_is_valid(t) for t in tasks):
        return False
    ids = [t["task_id"] for t in tasks]
    return len(set(ids)) == len(ids)


def _button_is_valid(element: Any) -> bool:
    if not isinstance(element, dict) or element.get("type") != "button":
        return False
    action_id, value = element.get("action_id"), element.get("value", "")
    return (
        _text_object(element.get("text"), BUTTON_TEXT_CHARS, ("plain_text",))
        and isinstance(action_id, str)
        and 0 < len(action_id) <= 255
        and isinstance(value, str)
        and len(value) <= 2_000
        and element.get("style", "primary") in ("primary", "danger")
    )


class FakeSlack:
    """State and behaviour of the fake; every method is safe to call from any thread."""

    bot_user_id = "UBOT"
    team_id = "T0001"
    bot_id = "BBOT"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.base_url = "http://127.0.0.1"  # set by FakeSlackServer.start()
        self.latency = 0.0
        self._reset_state()

    def _reset_state(self) -> None:
        self._calls: list[SlackCall] = []
        self._failures: dict[str, deque[_Failure]] = {}
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.history: list[dict[str, Any]] = []
        self.files: dict[str, dict[str, Any]] = {}
        self.responses: list[tuple[str, dict[str, Any]]] = []
        self._uploads: dict[str, dict[str, Any]] = {}
        self._counter = 0
        #: Files people attached (served at their ``url_private``), by id: the file object
        #: and the contents; every request for one; where a file's requests are redirected.
        self.hosted: dict[str, tuple[dict[str, Any], bytes]] = {}
        self.file_requests: list[FileRequest] = []
        self.file_redirects: dict[str, str] = {}
        #: False: the bot's token lacks ``files:read`` (files.info answers missing_scope,
        #: file requests get the sign-in page).
        self.files_read = True
        #: False: the workspace does not take plan and task card blocks (invalid_blocks).
        self.plan_blocks = True
        #: The thread statuses shown now, by (channel, thread_ts): status, loading messages.
        self.statuses: dict[tuple[str, str], tuple[str, list[str]]] = {}
        #: Assistant threads' suggested prompts and titles, by (channel, thread_ts).
        self.prompts: dict[tuple[str, str], dict[str, Any]] = {}
        self.titles: dict[tuple[str, str], str] = {}
        #: Agent sessions (``agents.sessions.*``), by (channel, thread_ts): status, title,
        #: initiator; the knobs of their refusals and warning below.
        self.sessions: dict[tuple[str, str], dict[str, Any]] = {}
        #: An error code every ``agents.sessions.*`` call answers (None: they work), e.g.
        #: ``unknown_method`` for a Slack without them, ``not_allowed_token_type``.
        self.sessions_refusal: str | None = None
        #: False: the app does not subscribe to ``agent_session_stopped`` (setStatus warns).
        self.stop_subscribed = True
        #: Users' Slack locales (``users.info`` with ``include_locale``), else en-US.
        self.locales: dict[str, str] = {}
        #: Methods whose calls are not answered until they are removed from the set.
        self.held: set[str] = set()
        #: The bot token's scopes, listed in every answer's X-OAuth-Scopes header as Slack
        #: does (https://api.slack.com/legacy/oauth-scopes: "X-OAuth-Scopes ... lists the
        #: scopes this token has"); the manifest's by default.
        self.scopes: tuple[str, ...] = BOT_SCOPES
        #: Canvases by id (``FakeCanvases``): what was created, shared and deleted.
        self.canvases = FakeCanvases(self)

    def reset(self) -> None:
        with self._lock:
            self._reset_state()
        self.latency = 0.0

    @property
    def calls(self) -> list[SlackCall]:
        with self._lock:
            return list(self._calls)

    def calls_to(self, method: str) -> list[SlackCall]:
        return [c for c in self.calls if c.method == method]

    def responses_to(self, response_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [body for rid, body in self.responses if rid == response_id]

    def response_url(self, response_id: str) -> str:
        return f"{self.base_url}/response/{response_id}"

    def fail_next(
        self,
        method: str,
        status: int = 500,
        retry_after: int = 1,
        times: int = 1,
        error: str | None = None,
        body: str | None = None,
    ) -> None:
        """Next `times` calls to `method` get HTTP 429 (+Retry-After), HTTP 5xx, or, when
        `error` is given, HTTP 200 `{"ok": false, "error": error}`; with `body` (one of
        ``BROKEN_BODIES``), HTTP `status` with that body instead of Slack's JSON."""
        with self._lock:
            failure = _Failure(status, retry_after, error, times, body)
            self._failures.setdefault(method, deque()).append(failure)

    def record(self, method: str, params: dict[str, Any], token: str | None) -> None:
        with self._lock:
            self._calls.append(SlackCall(method, params, token))

    def take_failure(self, method: str) -> _Failure | None:
        with self._lock:
            queue = self._failures.get(method)
            if not queue:
                return None
            failure = queue[0]
            failure.remaining -= 1
            if failure.remaining <= 0:
                queue.popleft()
            return failure

    def host_file(
        self,
        name: str,
        content: bytes,
        *,
        mimetype: str | None = None,
        filetype: str | None = None,
        user: str = "U123",
        mode: str = "hosted",
        team: str | None = None,
    ) -> dict[str, Any]:
        """A file someone attached: stored, and its file object as events and ``files.info``
        carry it (https://api.slack.com/types/file), its URLs on this fake's host."""
        team = team or self.team_id
        guessed = {
            ".pdf": ("application/pdf", "pdf"),
            ".txt": ("text/plain", "text"),
            ".md": ("text/markdown", "markdown"),
            ".html": ("text/html", "html"),
            ".docx": (
                "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                "docx",
            ),
            ".png": ("image/png", "png"),
            ".exe": ("application/x-msdownload", "binary"),
        }.get(
            name[name.rfind(".") :].lower() if "." in name else "",
            ("application/octet-stream", "binary"),
        )
        with self._lock:
            file_id = f"F{self._next_id():08d}"
            now = int(time.time())
            url = f"{self.base_url}/files-pri/{team}-{file_id}/{name}"
            download = f"{self.base_url}/files-pri/{team}-{file_id}/download/{name}"
            file = {
                "id": file_id,
                "created": now,
                "timestamp": now,
                "name": name,
                "title": name,
                "mimetype": mimetype or guessed[0],
                "filetype": filetype or guessed[1],
                "pretty_type": (filetype or guessed[1]).upper(),
                "user": user,
                "user_team": team,
                "editable": mode == "snippet",
                "size": len(content),
                "mode": mode,
                "is_external": False,
                "external_type": "",
                "is_public": True,
                "public_url_shared": False,
                "display_as_bot": False,
                "username": "",
                "url_private": url,
                "url_private_download": download,
                "permalink": f"https://fathom-fake.slack.com/files/{user}/{file_id}/{name}",
                "permalink_public": f"https://slack-files.com/{team}-{file_id}-0123456789",
                "is_starred": False,
                "has_rich_preview": False,
                "file_access": "visible",
            }
            self.hosted[file_id] = (file, content)
            return dict(file)

    @staticmethod
    def connect_stub(file: dict[str, Any]) -> dict[str, Any]:
        """How a Slack Connect channel's event carries ``file``: its id only, details by
        ``files.info`` (https://api.slack.com/types/file, "Slack Connect files")."""
        return {
            "id": file["id"],
            "mode": "file_access",
            "file_access": "check_file_info",
            "created": 0,
            "timestamp": 0,
            "user": "",
        }

    def record_file_request(self, path: str, authorization: str | None) -> None:
        with self._lock:
            self.file_requests.append(FileRequest(path, authorization))

    def file_at(self, team_file: str, name: str) -> bytes | None:
        """The contents served at ``/files-pri/<team>-<id>/<name>``, or None."""
        team, _, file_id = team_file.partition("-")
        with self._lock:
            hosted = self.hosted.get(file_id)
        if hosted is None or hosted[0].get("user_team") != team or hosted[0]["name"] != name:
            return None
        return hosted[1]

    def _file_info(self, p: dict[str, Any]) -> dict[str, Any]:
        if not self.files_read:
            raise SlackError("missing_scope")
        canvas = self.canvases.file(str(p.get("file") or ""))
        if canvas is not None:
            return {"file": canvas, "comments": [], "response_metadata": {"next_cursor": ""}}
        hosted = self.hosted.get(str(p.get("file") or ""))
        if hosted is None:
            raise SlackError("file_not_found")
        return {"file": dict(hosted[0]), "comments": [], "response_metadata": {"next_cursor": ""}}

    def _next_id(self) -> int:
        self._counter += 1
        return self._counter

    def _ts(self) -> str:
        n = self._next_id()
        return f"{1_700_000_000 + n // 10_000}.{(n % 10_000) * 100:06d}"

    def call(self, method: str, p: dict[str, Any]) -> dict[str, Any]:
        """Run an authenticated Web API method; raise SlackError for Slack-level errors."""
        with self._lock:
            if method == "auth.test":
                return {
                    "url": "https://fathom-fake.slack.com/",
                    "team": "Fathom Fake",
                    "user": "fathom",
                    "team_id": self.team_id,
                    "user_id": self.bot_user_id,
                    "bot_id": self.bot_id,
                    "is_enterprise_install": False,
                }
            if method == "chat.postMessage":
                return self._post(p)
            if method == "chat.update":
                return self._update(p)
            if method == "chat.postEphemeral":
                if not p.get("channel") or not p.get("user"):
                    raise SlackError(
                        "channel_not_found" if not p.get("channel") else "user_not_found"
                    )
                _check_message(p)
                return {"message_ts": self._ts()}
            if method == "conversations.info":
                cid = str(p.get("channel") or "")
                if not cid:
                    raise SlackError("channel_not_found")
                channel = {"id": cid, "name": f"chan-{cid.lower()}", "is_member": True}
                return {"channel": {**channel, "is_channel": True, "is_im": cid.startswith("D")}}
            if method == "users.info":
                uid = str(p.get("user") or "")
                if not uid:
                    raise SlackError("user_not_found")
                user = {"id": uid, "name": uid.lower(), "real_name": f"User {uid}"}
                if str(p.get("include_locale")).lower() in ("true", "1"):
                    user["locale"] = self.locales.get(uid, "en-US")
                return {"user": {**user, "team_id": self.team_id, "tz": "UTC"}}
            if method == "files.getUploadURLExternal":
                if not p.get("filename") or not str(p.get("length", "")).isdigit():
                    raise SlackError("invalid_arguments")
                file_id = f"F{self._next_id():08d}"
                self._uploads[file_id] = {"filename": p["filename"], "content": None}
                return {"upload_url": f"{self.base_url}/upload/{file_id}", "file_id": file_id}
            if method == "files.completeUploadExternal":
                return self._complete_upload(p)
            if method == "reactions.add":
                return {}
            if method == "assistant.threads.setStatus":
                return self._set_status(p)
            if method == "assistant.threads.setSuggestedPrompts":
                return self._set_prompts(p)
            if method == "assistant.threads.setTitle":
                return self._set_title(p)
            if method == "files.info":
                return self._file_info(p)
            if method in CANVAS_METHODS:
                return self.canvases.call(method, p)
            if method.startswith("agents.sessions."):
                return self._agent_sessions(method, p)
        raise SlackError("unknown_method")

    @staticmethod
    def _assistant_thread(p: dict[str, Any], *, thread_required: bool = True) -> tuple[str, str]:
        channel, ts = str(p.get("channel_id") or ""), str(p.get("thread_ts") or "")
        if not channel:
            raise SlackError("channel_not_found")
        if thread_required and not ts:
            raise SlackError("invalid_thread_ts")
        return channel, ts

    def _set_status(self, p: dict[str, Any]) -> dict[str, Any]:
        """``assistant.threads.setStatus``: a status (empty clears it) and at most ten
        loading messages."""
        key = self._assistant_thread(p)
        status, loading = p.get("status"), p.get("loading_messages", [])
        if not isinstance(status, str):
            raise SlackError("invalid_arguments")
        if not isinstance(loading, list) or len(loading) > MAX_LOADING_MESSAGES:
            raise SlackError("invalid_arguments")
        if not all(isinstance(m, str) and m for m in loading):
            raise SlackError("invalid_arguments")
        if status:
            self.statuses[key] = (status, list(loading))
        else:
            self.statuses.pop(key, None)
        return {}

    def _set_prompts(self, p: dict[str, Any]) -> dict[str, Any]:
        """``assistant.threads.setSuggestedPrompts``: one to four ``{title, message}``."""
        key = self._assistant_thread(p, thread_required=False)
        prompts = p.get("prompts")
        if not isinstance(prompts, list) or not 0 < len(prompts) <= MAX_SUGGESTED_PROMPTS:
            raise SlackError("invalid_arguments")
        for prompt in prompts:
            if not isinstance(prompt, dict):
                raise SlackError("invalid_arguments")
            if not all(isinstance(prompt.get(k), str) and prompt[k] for k in ("title", "message")):
                raise SlackError("invalid_arguments")
        self.prompts[key] = {"title": p.get("title"), "prompts": prompts}
        return {}

    def _set_title(self, p: dict[str, Any]) -> dict[str, Any]:
        key = self._assistant_thread(p)
        title = p.get("title")
        if not isinstance(title, str) or not title.strip():
            raise SlackError("invalid_arguments")
        self.titles[key] = title
        return {}

    # -- agent sessions ----------------------------------------------------------------

    def _agent_sessions(self, method: str, p: dict[str, Any]) -> dict[str, Any]:
        """``agents.sessions.setStatus`` and ``agents.sessions.rename`` as
        docs.slack.dev/reference/methods/agents.sessions.setStatus (and .rename) describe
        them: a bot token with ``chat:write``; ``status`` one of active, processing,
        suspended, closed (free text: ``invalid_arguments``, java-slack-sdk PR #1633's
        "must be a valid enum value"); the session created on the first call, its
        ``title`` (at most 200 characters) and ``initiator_user_id`` taken then only; the
        ``missing_agent_session_stopped_event_subscription`` warning while the app does not
        subscribe to the Stop event (docs.slack.dev/reference/events/agent_session_stopped).
        """
        if self.sessions_refusal is not None:
            raise SlackError(self.sessions_refusal)
        if "chat:write" not in self.scopes:
            raise SlackError("missing_scope")
        key = self._assistant_thread(p)
        title = p.get("title")
        if title is not None and (not isinstance(title, str) or len(title) > 200):
            raise SlackError("invalid_arguments")
        if method == "agents.sessions.rename":
            if not title or not title.strip():
                raise SlackError("invalid_arguments")
            session = self.sessions.get(key)
            if session is None:  # (Slack documents no code for it)
                raise SlackError("thread_not_found")
            session["title"] = title
            return {}
        if method != "agents.sessions.setStatus":
            raise SlackError("unknown_method")
        status = p.get("status")
        if status not in SESSION_STATUSES:
            raise SlackError("invalid_arguments")
        session = self.sessions.setdefault(
            key, {"title": title, "initiator": p.get("initiator_user_id")}
        )
        session["status"] = status
        answer: dict[str, Any] = {"status": status, "title": session["title"]}
        if not self.stop_subscribed:
            answer["warning"] = "missing_agent_session_stopped_event_subscription"
        return answer

    def _post(self, p: dict[str, Any]) -> dict[str, Any]:
        if not p.get("channel"):
            raise SlackError("channel_not_found")
        if not p.get("text") and not p.get("blocks"):
            raise SlackError("no_text")
        _check_message(p, plans=self.plan_blocks)
        channel, ts = str(p["channel"]), self._ts()
        message = {
            "type": "message",
            "channel": channel,
            "ts": ts,
            "text": p.get("text", ""),
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
        }
        for key in ("blocks", "thread_ts"):
            if p.get(key):
                message[key] = p[key]
        self.messages[(channel, ts)] = dict(message)
        self.history.append(dict(message))
        return {"channel": channel, "ts": ts, "message": message}

    def _update(self, p: dict[str, Any]) -> dict[str, Any]:
        key = (str(p.get("channel") or ""), str(p.get("ts") or ""))
        if key not in self.messages:
            raise SlackError("message_not_found")
        if not p.get("text") and not p.get("blocks"):
            raise SlackError("no_text")
        _check_message(p, plans=self.plan_blocks)
        message = self.messages[key]
        message["text"] = p.get("text", "")
        if "blocks" in p:  # omitted keeps the old blocks; [] removes them
            message["blocks"] = p["blocks"]
        message["edited"] = {"user": self.bot_user_id, "ts": self._ts()}
        return {"channel": key[0], "ts": key[1], "text": message["text"]}

    def _complete_upload(self, p: dict[str, Any]) -> dict[str, Any]:
        files = p.get("files")
        if isinstance(files, str):
            try:
                files = json.loads(files)
            except ValueError:
                raise SlackError("invalid_arguments") from None
        if not isinstance(files, list) or not files:
            raise SlackError("invalid_arguments")
        out = []
        for item in files:
            upload = self._uploads.get(str(item.get("id")))
            if upload is None or upload["content"] is None:
                raise SlackError("file_not_found")
        for item in files:
            upload = self._uploads.pop(str(item["id"]))
            title = item.get("title") or upload["filename"]
            self.files[item["id"]] = {
                "content": upload["content"],
                "title": title,
                "filename": upload["filename"],
                "channel": p.get("channel_id"),
                "thread_ts": p.get("thread_ts"),
                "initial_comment": p.get("initial_comment"),
            }
            out.append({"id": item["id"], "title": title, "name": upload["filename"]})
        return {"files": out}

    def record_response(self, response_id: str, body: Any) -> None:
        with self._lock:
            self.responses.append((response_id, body))

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"history": list(self.history), "current": list(self.messages.values())}

    def store_upload(self, file_id: str, content: bytes) -> bool:
        with self._lock:
            if file_id not in self._uploads:
                return False
            self._uploads[file_id]["content"] = content
            return True


# --- canvases ------------------------------------------------------------------------------

CANVAS_METHODS = frozenset({"canvases.create", "canvases.access.set", "canvases.delete"})
#: ``document_content.markdown`` that ``canvases.create`` takes (docs.slack.dev
#: ``conversations.canvases.create``: "The markdown content is limited to 1 MiB (1,048,576
#: characters)").
MAX_CANVAS_MARKDOWN = 1_048_576
#: How many ids ``canvases.access.set`` takes in one list (its method page: "Maximum: 20").
MAX_ACCESS_IDS = 20
ACCESS_LEVELS = frozenset({"read", "write", "owner"})
_QUOTED_LIST = re.compile(r"^>[ \t]*(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)", re.MULTILINE)
_DEEP_HEADING = re.compile(r"^#{4,}[ \t]", re.MULTILINE)


class FakeCanvases:
    """Slack's standalone canvases as its method pages describe them (docs.slack.dev
    ``canvases.create``, ``canvases.access.set``, ``canvases.delete``): created by a bot token
    with ``canvases:write`` (else ``missing_scope``) on a paid plan (a free team must tab the
    canvas in a channel: ``free_teams_cannot_create_non_tabbed_canvases``); refused as
    ``canvas_creation_failed`` with a ``detail`` for content a canvas does not take (over
    1 MiB, a list inside a quote block as in the page's own example, headings past h3, which
    the page's list of elements does not name); shared with channels or users (not both; a
    DM's ``D…`` id is not taken: "Channel IDs associated with direct messages ... will not
    be accepted"); a file whose ``files.info`` gives its ``permalink``. Runs under
    :class:`FakeSlack`'s lock."""

    def __init__(self, slack: FakeSlack) -> None:
        self._slack = slack
        #: By id: title, markdown, channel_id it was tabbed in, access {id: level}, deleted.
        self.made: dict[str, dict[str, Any]] = {}
        #: The team's plan: "paid", or "free" (standalone canvases refused).
        self.plan = "paid"
        #: An error every ``canvases.create`` answers (``canvas_disabled_user_team``...).
        self.refusal: str | None = None

    def live(self) -> dict[str, dict[str, Any]]:
        """The canvases not deleted."""
        return {cid: c for cid, c in self.made.items() if not c["deleted"]}

    def call(self, method: str, p: dict[str, Any]) -> dict[str, Any]:
        if "canvases:write" not in self._slack.scopes:
            raise SlackError("missing_scope")
        if method == "canvases.create":
            return self._create(p)
        if method == "canvases.access.set":
            return self._access_set(p)
        return self._delete(p)

    def _create(self, p: dict[str, Any]) -> dict[str, Any]:
        if self.refusal is not None:
            raise SlackError(self.refusal)
        channel = p.get("channel_id")
        if self.plan == "free" and not channel:
            raise SlackError("free_teams_cannot_create_non_tabbed_canvases")
        content = p.get("document_content") or {"type": "markdown", "markdown": ""}
        if isinstance(content, str):
            try:
                content = json.loads(content)
            except ValueError:
                raise SlackError("invalid_arguments") from None
        if not isinstance(content, dict) or content.get("type") != "markdown":
            raise SlackError("invalid_arguments")
        markdown = content.get("markdown")
        if not isinstance(markdown, str):
            raise SlackError("invalid_arguments")
        if len(markdown) > MAX_CANVAS_MARKDOWN:
            raise CanvasContentError("'content' error: content too long")
        for pattern, what in ((_QUOTED_LIST, "List"), (_DEEP_HEADING, "Heading level")):
            found = pattern.search(markdown)
            if found is not None:
                line = markdown.count("\n", 0, found.start()) + 1
                raise CanvasContentError(
                    f"'content' error: line {line}: Unsupported block type ({what})"
                    + (" within block quote" if what == "List" else "")
                )
        canvas_id = f"F{self._slack._next_id():08d}"
        access = {str(channel): "write"} if channel else {}
        self.made[canvas_id] = {
            "title": str(p.get("title") or ""),
            "markdown": markdown,
            "channel_id": channel,
            "access": access,
            "deleted": False,
        }
        return {"canvas_id": canvas_id}

    def _ids(self, value: Any) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            value = value.split(",") if not value.startswith("[") else json.loads(value)
        if not isinstance(value, list) or not 0 < len(value) <= MAX_ACCESS_IDS:
            raise SlackError("invalid_arguments")
        return [str(v).strip() for v in value]

    def _access_set(self, p: dict[str, Any]) -> dict[str, Any]:
        canvas = self.live().get(str(p.get("canvas_id") or ""))
        if canvas is None:
            raise SlackError("canvas_not_found")
        level = p.get("access_level")
        channels, users = self._ids(p.get("channel_ids")), self._ids(p.get("user_ids"))
        if level not in ACCESS_LEVELS:
            raise SlackError("invalid_arguments")
        if bool(channels) == bool(users):
            raise SlackError("invalid_parameters")  # one of the two, not both
        if level == "owner" and channels:
            raise SlackError("invalid_arguments")  # only users can be owners
        if any(c.startswith("D") for c in channels):
            raise SlackError("invalid_arguments")  # DMs are shared by user ids
        for entity in channels or users:
            canvas["access"][entity] = level
        return {}

    def _delete(self, p: dict[str, Any]) -> dict[str, Any]:
        canvas = self.live().get(str(p.get("canvas_id") or ""))
        if canvas is None:
            raise SlackError("canvas_not_found")
        canvas["deleted"] = True
        return {}

    def file(self, file_id: str) -> dict[str, Any] | None:
        """A live canvas as ``files.info`` gives it, or None: a file of type ``quip``
        (``application/vnd.slack-docs``, "Canvas") whose ``permalink`` is
        ``https://<workspace>.slack.com/docs/<team>/<id>`` (the shape of canvas file objects
        in Slack exports and ``files.list`` answers)."""
        canvas = self.live().get(file_id)
        if canvas is None:
            return None
        team = self._slack.team_id
        return {
            "id": file_id,
            "name": canvas["title"] or "Untitled",
            "title": canvas["title"],
            "mimetype": "application/vnd.slack-docs",
            "filetype": "quip",
            "pretty_type": "Canvas",
            "mode": "quip",
            "user": self._slack.bot_user_id,
            "user_team": team,
            "is_external": False,
            "permalink": f"https://fathom-fake.slack.com/docs/{team}/{file_id}",
        }


class CanvasContentError(SlackError):
    """``canvas_creation_failed`` with Slack's ``detail`` (its method page's "Typical error
    response for bad content")."""

    def __init__(self, detail: str) -> None:
        super().__init__("canvas_creation_failed")
        self.detail = detail


async def _params(request: Request) -> dict[str, Any]:
    """Merge query string, form body and JSON body, like Slack accepts all three."""
    params: dict[str, Any] = dict(request.query_params)
    raw = await request.body()
    ctype = request.headers.get("content-type", "")
    if "json" in ctype and raw:
        body = json.loads(raw)
        if isinstance(body, dict):
            params.update(body)
    elif raw:
        params.update(parse_qsl(raw.decode(), keep_blank_values=True))
    # JSON strings inside form posts
    for key in (
        "blocks",
        "attachments",
        "files",
        "loading_messages",
        "prompts",
        "channel_ids",
        "user_ids",
    ):
        value = params.get(key)
        if isinstance(value, str) and value.startswith("["):
            try:
                params[key] = json.loads(value)
            except ValueError:
                pass  # left as a string; validation answers invalid_blocks
    return params


def build_slack_app(fake: FakeSlack) -> Starlette:
    async def api(request: Request) -> Response:
        method = request.path_params["method"]
        try:
            params = await _params(request)
        except ValueError:
            return JSONResponse({"ok": False, "error": "invalid_json"})
        auth = request.headers.get("authorization", "")
        token = auth[7:].strip() if auth.startswith("Bearer ") else params.pop("token", None)
        fake.record(method, params, token)
        if fake.latency > 0:
            await asyncio.sleep(fake.latency)
        # A method Slack is slow to answer, until a test (another thread) releases it.
        while method in fake.held:  # noqa: ASYNC110 - set from another thread
            await asyncio.sleep(0.01)
        failure = fake.take_failure(method)
        if failure is not None and failure.body is not None:
            return broken_body(failure.body, failure.status)
        if failure is not None and failure.error is not None:
            return JSONResponse({"ok": False, "error": failure.error})
        if failure is not None and failure.status == 429:
            headers = {"Retry-After": str(failure.retry_after)}
            return JSONResponse({"ok": False, "error": "ratelimited"}, 429, headers=headers)
        if failure is not None:
            return JSONResponse({"ok": False, "error": "fatal_error"}, failure.status)
        if not token:
            return JSONResponse({"ok": False, "error": "not_authed"})
        if not token.startswith("xoxb-"):
            return JSONResponse({"ok": False, "error": "invalid_auth"})
        scopes = {"X-OAuth-Scopes": ",".join(fake.scopes)}
        try:
            return JSONResponse({"ok": True, **fake.call(method, dict(params))}, headers=scopes)
        except CanvasContentError as exc:
            body = {"ok": False, "error": exc.code, "detail": exc.detail}
            return JSONResponse(body, headers=scopes)
        except SlackError as exc:
            return JSONResponse({"ok": False, "error": exc.code}, headers=scopes)

    async def upload(request: Request) -> Response:
        content = await request.body()
        if not fake.store_upload(request.path_params["file_id"], content):
            return PlainTextResponse("file not found", 404)
        return PlainTextResponse(f"OK - {len(content)}")

    async def file_contents(request: Request) -> Response:
        """``url_private`` / ``url_private_download``: the contents for a bot token allowed to
        read files; otherwise Slack's sign-in page with HTTP 200, like Slack."""
        team_file, name = request.path_params["team_file"], request.path_params["name"]
        auth = request.headers.get("authorization")
        fake.record_file_request(request.url.path, auth)
        failure = fake.take_failure(FILES)
        if failure is not None and failure.status == 429:
            return PlainTextResponse("ratelimited", 429, {"Retry-After": str(failure.retry_after)})
        if failure is not None:
            return broken_body(failure.body or "html", failure.status)
        redirect = fake.file_redirects.get(team_file.partition("-")[2])
        if redirect is not None:
            return Response(status_code=302, headers={"Location": redirect})
        token = auth[7:].strip() if auth and auth.startswith("Bearer ") else ""
        if not token.startswith("xoxb-") or not fake.files_read:
            return Response(SIGN_IN_PAGE, 200, media_type="text/html")
        content = fake.file_at(team_file, name)
        if content is None:
            return PlainTextResponse("Not Found", 404)
        headers = {"Content-Disposition": f'attachment; filename="{name}"'}
        return Response(content, 200, media_type="application/octet-stream", headers=headers)

    async def response_url(request: Request) -> Response:
        body = await request.json()
        fake.record_response(request.path_params["rid"], body)
        return PlainTextResponse("ok")

    async def calls(request: Request) -> JSONResponse:
        return JSONResponse(
            [{"method": c.method, "params": c.params, "token": c.token} for c in fake.calls]
        )

    async def messages(request: Request) -> JSONResponse:
        return JSONResponse(fake.snapshot())

    async def fail_next(request: Request) -> JSONResponse:
        d = await request.json()
        fake.fail_next(
            d["method"],
            int(d.get("status", 500)),
            int(d.get("retry_after", 1)),
            int(d.get("times", 1)),
            d.get("error"),
            d.get("body"),
        )
        return JSONResponse({"ok": True})

    async def reset(request: Request) -> JSONResponse:
        fake.reset()
        return JSONResponse({"ok": True})

    return Starlette(
        routes=[
            Route("/api/{method}", api, methods=["GET", "POST"]),
            Route("/upload/{file_id}", upload, methods=["POST"]),
            Route("/files-pri/{team_file}/{name}", file_contents, methods=["GET"]),
            Route("/files-pri/{team_file}/download/{name}", file_contents, methods=["GET"]),
            Route("/response/{rid}", response_url, methods=["POST"]),
            Route("/_fake/calls", calls, methods=["GET"]),
            Route("/_fake/messages", messages, methods=["GET"]),
            Route("/_fake/fail_next", fail_next, methods=["POST"]),
            Route("/_fake/reset", reset, methods=["POST"]),
        ]
    )


class FakeSlackServer(BackgroundServer):
    """`with FakeSlackServer() as s: AsyncWebClient(token="xoxb-t", base_url=s.api_url)`."""

    def __init__(
        self, fake: FakeSlack | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.fake = fake or FakeSlack()
        super().__init__(build_slack_app(self.fake), host, port)

    def start(self, timeout: float = 5.0) -> Self:
        super().start(timeout)
        self.fake.base_url = self.url
        return self

    def reset(self) -> None:
        """The fake as it was when it started: ``FakeSlack.reset``, and its address its own again
        (a test may point it elsewhere)."""
        self.fake.reset()
        self.fake.base_url = self.url

    @property
    def api_url(self) -> str:
        return f"{self.url}/api/"


# --- inbound requests (Slack -> app), signed like Slack signs them ---------------------------


def sign(body: bytes, secret: str, timestamp: int | None = None) -> dict[str, str]:
    """Headers Slack sends: v0=HMAC-SHA256(secret, f"v0:{ts}:{raw body}") in hex."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + ts.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": f"v0={digest}"}


def _now_ts() -> str:
    return f"{time.time():.6f}"


def slash_command_body(
    text: str,
    *,
    command: str = "/research",
    user_id: str = "U123",
    user_name: str = "alice",
    channel_id: str = "C0001",
    channel_name: str = "general",
    team_id: str = "T0001",
    team_domain: str = "fathom",
    api_app_id: str = "A0001",
    trigger_id: str = "1234567890.1234567890.abcdef0123456789",
    response_url: str = "https://hooks.slack.com/commands/T0001/1/abc",
) -> bytes:
    """Form-encoded slash command with the fields of Slack's own signing example."""
    fields = {
        "token": "verification-token",
        "team_id": team_id,
        "team_domain": team_domain,
        "channel_id": channel_id,
        "channel_name": channel_name,
        "user_id": user_id,
        "user_name": user_name,
        "command": command,
        "text": text,
        "api_app_id": api_app_id,
        "is_enterprise_install": "false",
        "response_url": response_url,
        "trigger_id": trigger_id,
    }
    return urlencode(fields).encode()


def event_callback_body(
    event: dict[str, Any],
    *,
    event_id: str = "Ev01",
    team_id: str = "T0001",
    api_app_id: str = "A0001",
    event_time: int | None = None,
) -> bytes:
    envelope = {
        "token": "verification-token",
        "team_id": team_id,
        "api_app_id": api_app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": int(time.time()) if event_time is None else event_time,
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team_id,
                "user_id": FakeSlack.bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
    }
    return json.dumps(envelope).encode()


def block_actions_body(
    message: dict[str, Any],
    action_id: str,
    *,
    user_id: str = "U123",
    team_id: str = "T0001",
    value: str | None = None,
    api_app_id: str = "A0001",
) -> bytes:
    """A press on the button ``action_id`` of a posted ``message`` (as the fake stores it),
    form-encoded as ``payload=<json>`` like Slack sends interactivity: the shape of Slack's
    block_actions samples (team, user, container, channel, the message with its blocks,
    actions). ``value`` overrides the button's own value (a forged press)."""
    button = next(
        element
        for block in message.get("blocks") or []
        if block.get("type") == "actions"
        for element in block["elements"]
        if element.get("action_id") == action_id
    )
    channel = str(message["channel"])
    payload = {
        "type": "block_actions",
        "team": {"id": team_id, "domain": "fathom"},
        "user": {"id": user_id, "username": user_id.lower(), "team_id": team_id},
        "api_app_id": api_app_id,
        "token": "verification-token",
        "container": {
            "type": "message",
            "message_ts": message["ts"],
            "channel_id": channel,
            "is_ephemeral": False,
        },
        "trigger_id": f"{int(time.time())}.1234.{action_id}",
        "channel": {"id": channel, "name": f"chan-{channel.lower()}"},
        "message": {key: value for key, value in message.items() if key != "channel"},
        "response_url": f"https://hooks.slack.com/actions/{team_id}/1/abc",
        "actions": [
            {
                "action_id": action_id,
                "block_id": "fathom_controls",
                "text": button["text"],
                "value": button.get("value") if value is None else value,
                "type": "button",
                "action_ts": _now_ts(),
                **({"style": button["style"]} if "style" in button else {}),
            }
        ],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def _message_event(
    type_: str, text: str, user: str, channel: str, ts: str | None, thread_ts: str | None
) -> dict[str, Any]:
    ts = ts or _now_ts()
    event: dict[str, Any] = {
        "type": type_,
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "client_msg_id": str(uuid.uuid4()),
        "team": FakeSlack.team_id,
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event


def app_mention_event(
    text: str,
    *,
    user: str = "U123",
    channel: str = "C0001",
    ts: str | None = None,
    thread_ts: str | None = None,
) -> dict[str, Any]:
    """`text` gets a leading `<@UBOT>` unless it already mentions the bot."""
    mention = f"<@{FakeSlack.bot_user_id}>"
    full = text if mention in text else f"{mention} {text}"
    return _message_event("app_mention", full, user, channel, ts, thread_ts)


def im_message_event(
    text: str,
    *,
    user: str = "U123",
    channel: str = "D0001",
    ts: str | None = None,
    thread_ts: str | None = None,
) -> dict[str, Any]:
    event = _message_event("message", text, user, channel, ts, thread_ts)
    event["channel_type"] = "im"
    return event


def channel_message_event(
    text: str,
    *,
    user: str = "U123",
    channel: str = "C0001",
    ts: str | None = None,
    thread_ts: str | None = None,
    channel_type: str = "channel",
) -> dict[str, Any]:
    """A message in a public channel (``message.channels``; ``group``: a private one,
    ``message.groups``), as the Events API reference shows it: the same fields as a DM's,
    with ``channel_type`` "channel" and, for a reply, the thread's ``thread_ts``."""
    event = _message_event("message", text, user, channel, ts, thread_ts)
    event["channel_type"] = channel_type
    return event


def assistant_thread_event(
    type_: str = "assistant_thread_started",
    *,
    user: str = "U123",
    channel: str = "D0001",
    thread_ts: str | None = None,
    context_channel: str | None = "C0001",
    team_id: str = "T0001",
) -> dict[str, Any]:
    """``assistant_thread_started`` (or ``assistant_thread_context_changed``) as Slack's
    Events API reference shows it: the thread in the app's DM and the channel the user is
    viewing (none: an empty context)."""
    context: dict[str, Any] = {}
    if context_channel:
        context = {"channel_id": context_channel, "team_id": team_id, "enterprise_id": None}
    return {
        "type": type_,
        "assistant_thread": {
            "user_id": user,
            "context": context,
            "channel_id": channel,
            "thread_ts": thread_ts or _now_ts(),
        },
        "event_ts": _now_ts(),
    }


def agent_session_stopped_event(
    *, user: str = "U123", channel: str = "C0001", thread_ts: str, streaming: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``agent_session_stopped`` (a user pressed Slack's Stop on a ``processing`` session),
    the inner event as docs.slack.dev/reference/events/agent_session_stopped shows it (and
    node-slack-sdk's ``AgentSessionStoppedEvent``): no ``team_id`` inside, it is on the
    ``event_callback`` envelope; ``streaming_message_ts`` empty when no stream was active."""
    return {
        "channel": channel,
        "event_ts": _now_ts(),
        "streaming_message_ts": list(streaming),
        "thread_ts": thread_ts,
        "type": "agent_session_stopped",
        "user": user,
    }


def url_verification_body(challenge: str) -> bytes:
    body = {"token": "verification-token", "challenge": challenge, "type": "url_verification"}
    return json.dumps(body).encode()


def with_files(event: dict[str, Any], *files: str | dict[str, Any]) -> dict[str, Any]:
    """``event`` carrying files, as Slack sends a message with uploads: the file objects
    under ``files`` (:meth:`FakeSlack.host_file`'s, or, for a name, one on Slack's own host
    that the fake does not serve), ``upload: true``, and, for a ``message`` event,
    ``subtype: file_share``."""
    objects = [
        file if isinstance(file, dict) else _unserved_file(file, event)
        for file in files or ("notes.pdf",)
    ]
    event = dict(event, files=objects, upload=True, display_as_bot=False)
    if event.get("type") == "message":
        event["subtype"] = "file_share"
    return event


def _unserved_file(name: str, event: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": f"F{uuid.uuid4().hex[:10].upper()}",
        "created": int(time.time()),
        "timestamp": int(time.time()),
        "name": name,
        "title": name,
        "mimetype": "application/pdf" if name.endswith(".pdf") else "text/plain",
        "filetype": "pdf" if name.endswith(".pdf") else "text",
        "user": event.get("user"),
        "mode": "hosted",
        "is_external": False,
        "size": 12345,
        "url_private": f"https://files.slack.com/files-pri/T0001-F0001/{name}",
        "permalink": f"https://example.slack.com/files/U123/F0001/{name}",
    }
