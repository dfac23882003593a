"""A fake of Microsoft Teams' Bot Framework services, and activities built as Teams sends them.

One loopback server plays every Microsoft service a Teams bot talks to:

- the Bot Framework's OpenID metadata and signing keys (``/openid/...``): one real RSA key
  is published (kid :data:`KEY_ID`), a second one (the forger's) is not, and :func:`sign`
  makes the ``Authorization`` header the Bot Connector puts on each activity with either;
- the Microsoft identity platform's token endpoint (``/{tenant}/oauth2/v2.0/token``, client
  credentials), which issues opaque access tokens to :data:`APP_ID` / :data:`APP_PASSWORD`;
- the Bot Connector REST API under the service URL's path (``/amer/v3/conversations/...``):
  send, reply, update, delete and create conversation, each needing a token it issued, with
  Teams' size limit (413), its refusals of a malformed AI label or citations (400,
  :func:`entity_problem`) and failures (429 with ``Retry-After``, 5xx HTML pages) on demand;
  an activity holding both text and cards is split as Teams splits it (one message with the
  text, one per card) and answered ``202 Accepted`` with no body (:meth:`FakeTeams._send`);
- the pre-authenticated download addresses of files users send the bot in personal chats
  (``/files/<key>?tempauth=...``), which refuse a request carrying the bot's token.

Every call is recorded (:class:`TeamsCall`), and every message the bot posted is kept with
all its versions (:class:`Posted`), readable per channel, reply chain or chat.
"""

from __future__ import annotations

import functools
import html
import json
import re
import secrets
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import parse_qs, quote, unquote

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.fakes.server import BackgroundServer

APP_ID = "9f1e3c2a-5b7d-4e8f-a1b2-c3d4e5f6a7b8"
APP_PASSWORD = "fake-teams-password"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
BOT_ID = f"28:{APP_ID}"
BOT_NAME = "Fathom"
ISSUER = "https://api.botframework.com"
KEY_ID = "fake-teams-key-1"
#: The path of the service URL on activities: ``f"{server.url}{SERVICE_PATH}"``.
SERVICE_PATH = "/amer/"
#: Bytes of an activity's JSON the Bot Connector accepts (larger: 413 MessageSizeTooBig).
MAX_ACTIVITY_BYTES = 28_000
#: The scope of a token for the Bot Connector.
SCOPE = "https://api.botframework.com/.default"
FILE_DOWNLOAD_INFO = "application/vnd.microsoft.teams.file.download.info"
#: The kinds :meth:`FakeTeams.fail_next` knows.
FAILURE_KINDS = ("send", "update", "delete", "token", "file", "metadata", "keys")
#: How the fake answers a send it split into several messages (:attr:`FakeTeams.split_answer`):
#: ``202`` with no body, as the Bot Connector answers; or a resource response whose id is
#: empty, as the Bot Framework SDKs hand such an answer to a bot.
SplitAnswer = Literal["202", "empty id"]

TEAM_ID = "19:team-general@thread.tacv2"
CHANNEL_ID = "19:fathom-research@thread.tacv2"
USER_ID = "29:1user-aad"
USER_NAME = "Ada Lovelace"
AAD_ID = "00000000-0000-0000-0000-0000000000a1"
#: A personal chat's id as Teams makes them (131 characters; the one of
#: msteams-docs' "Receive a message" sample).
PERSONAL_CHAT = (
    "a:17I0kl9EkpE1O9PH5TWrzrLNwnWWcfrU7QZjKR0WSfOpzbfcAg2IaydGElSo10tVr4C7Fc6GtieTJX663Wu"
    "JCc1uA83n4CSrHSgGBj5XNYLcVlJAs2ZX8DbYBPck201w-"
)
GROUP_CHAT = "19:meeting-group@thread.v2"


# -- keys ----------------------------------------------------------------------------------------


@functools.cache
def _key_pair(which: str) -> rsa.RSAPrivateKey:
    """A new RSA 2048 key, kept for the process under its name."""
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def signing_key(which: Literal["published", "forger"] = "published") -> rsa.RSAPrivateKey:
    """The RSA 2048 private key of this process that signs activities' tokens: the one the
    fake publishes (kid :data:`KEY_ID`), or the forger's, published nowhere. Each is made
    once, when first asked for."""
    return _key_pair(which)


def published_jwk(
    kid: str = KEY_ID, endorsements: tuple[str, ...] = ("msteams", "skype")
) -> dict[str, Any]:
    """The published key as the Bot Framework lists it in its keys document (a JWK with
    ``x5t``, an empty ``x5c`` and the channels it is endorsed for)."""
    public = RSAAlgorithm.to_jwk(signing_key("published").public_key(), as_dict=True)
    return {
        "kty": "RSA",
        "use": "sig",
        "kid": kid,
        "x5t": kid,
        "n": public["n"],
        "e": public["e"],
        "x5c": [],
        "endorsements": list(endorsements),
    }


_last_id = 0
_id_lock = threading.Lock()


def new_activity_id() -> str:
    """A message id as Teams makes them: the epoch milliseconds, unique and increasing in this
    process (shared by the fake's own messages and the builders' activities)."""
    global _last_id
    with _id_lock:
        _last_id = max(int(time.time() * 1000), _last_id + 1)
        return str(_last_id)


# -- the recorded state ----------------------------------------------------------------------


@dataclass(frozen=True)
class TeamsCall:
    """One request to the fake's token endpoint or Bot Connector API."""

    method: str
    path: str  # as sent: the conversation id still percent-encoded
    conversation_id: str  # decoded; "" for the token endpoint and create conversation
    activity_id: str | None
    body: dict[str, Any]  # the JSON body, or the token request's form fields
    token: str  # the bearer token it carried ("" if none)
    time: float = field(default_factory=time.time)
    #: "send" (both POST forms), "create", "update", "delete", "token", or "other".
    kind: str = ""


@dataclass
class Posted:
    """A message the bot posted: where it was addressed and every version of its body."""

    id: str
    conversation_id: str  # in full, decoded, as addressed (a channel's with ";messageid=")
    reply_to: str | None
    versions: list[dict[str, Any]] = field(default_factory=list)  # sent, then each update
    deleted: bool = False

    @property
    def body(self) -> dict[str, Any]:
        """The activity as it is now (its latest version)."""
        return self.versions[-1]

    @property
    def text(self) -> str:
        return str(self.body.get("text") or "")

    @property
    def attachments(self) -> list[dict[str, Any]]:
        return list(self.body.get("attachments") or [])


@dataclass(frozen=True)
class FileFetch:
    """One GET of a file's download address."""

    key: str
    headers: dict[str, str]  # lower-cased names
    status: int
    time: float = field(default_factory=time.time)


@dataclass
class _Failure:
    status: int
    remaining: int
    retry_after: float | None
    body: bytes | None
    content_type: str


@dataclass(frozen=True)
class _File:
    data: bytes
    name: str
    tempauth: str


@dataclass(frozen=True)
class Answer:
    """What the fake answers one request: status, body bytes, content type, headers."""

    status: int
    body: bytes = b""
    content_type: str | None = "application/json"  # None: no Content-Type (an empty answer)
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> Response:
        return Response(self.body, self.status, self.headers, media_type=self.content_type)


def _json(status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> Answer:
    return Answer(status, json.dumps(payload).encode(), "application/json", headers or {})


def _connector_error(status: int, code: str, message: str) -> Answer:
    """The Bot Connector's error body (``ErrorResponse``)."""
    return _json(status, {"error": {"code": code, "message": message}})


def _aad_error(status: int, error: str, code: int, description: str) -> Answer:
    """The Microsoft identity platform's error body."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    trace = str(uuid.uuid4())
    return _json(
        status,
        {
            "error": error,
            "error_description": f"AADSTS{code}: {description} Trace ID: {trace} "
            f"Correlation ID: {uuid.uuid4()} Timestamp: {now}",
            "error_codes": [code],
            "timestamp": now,
            "trace_id": trace,
            "correlation_id": str(uuid.uuid4()),
        },
    )


def _retry_after(seconds: float) -> str:
    return str(int(seconds)) if float(seconds).is_integer() else str(seconds)


def split_activity(activity: dict[str, Any]) -> list[dict[str, Any]]:
    """The messages Teams makes of one activity sent to it.

    "Message splitting occurs when a text message and an attachment are sent in the same
    activity payload. Teams splits this activity into two separate activities, one with a
    text message and the other with an attachment. As the activity is split, you do not
    receive the message ID in response" (MicrosoftDocs/msteams-docs,
    ``msteams-platform/bots/how-to/conversations/conversation-messages.md``, the note under
    "Send a message"). And, from the Teams team (OfficeDev/BotBuilder-MicrosoftTeams#125):
    "activity with text + attachment (card) = 1 message w/ text only + 1 message with card
    only; activity with attachments (cards) in list layout = multiple messages, 1 for each
    card. In these cases, you'll see the service return a 202 status code with no activity id
    in the response" (also microsoft/BotFramework-Services#98, MicrosoftDocs/msteams-docs#1321,
    MicrosoftDocs/bot-docs#1726). ``list`` is the Bot Framework's default layout."""
    attachments = activity.get("attachments")
    cards = attachments if isinstance(attachments, list) else []
    text = activity.get("text")
    has_text = isinstance(text, str) and bool(text.strip())
    in_list = activity.get("attachmentLayout", "list") == "list"
    if not cards or (not has_text and (len(cards) == 1 or not in_list)):
        return [activity]
    pieces: list[dict[str, Any]] = []
    if has_text:
        pieces.append({k: v for k, v in activity.items() if k not in ("attachments",)})
    card_only = {k: v for k, v in activity.items() if k not in ("text", "textFormat")}
    if in_list:
        pieces.extend({**card_only, "attachments": [card]} for card in cards)
    else:
        pieces.append(card_only)
    return pieces


#: The root entity of a message with Teams' AI label and citations.
MESSAGE_ENTITY = "https://schema.org/Message"
#: Teams' limits on citations (msteams-docs, ``bots/how-to/bot-messages-ai-generated-content.md``
#: and "Add citations and sensitivity labels to agent messages", 2026-07).
MAX_CITATIONS = 20
CITATION_NAME_CHARS = 80
CITATION_ABSTRACT_CHARS = 160


def entity_problem(activity: dict[str, Any]) -> str | None:
    """Why the Bot Connector refuses ``activity``'s message entity (400), or None.

    The documented refusals ("Error handling" of Microsoft's "Enhance AI-generated bot
    messages"): "Multiple root message entities found under entities array", "Error parsing
    message entity from entities array", "Bot message with more than 20 citations", "The
    appearance object is empty", "Error while parsing citation entity with ID: X". Where the
    docs give a maximum (a name of 80 characters, an abstract of 160, three keywords of 28)
    but not what Teams does beyond it, the fake refuses it as a citation it cannot parse: a
    bot that keeps within the limits never meets the difference."""
    entities = activity.get("entities")
    if entities is None:
        return None
    if not isinstance(entities, list):
        return "Error parsing message entity from entities array."
    roots = [e for e in entities if isinstance(e, dict) and e.get("type") == MESSAGE_ENTITY]
    if len(roots) > 1:
        return "Multiple root message entities found under entities array."
    if not roots:
        return None
    (root,) = roots
    if root.get("@type") != "Message" or root.get("@context") != "https://schema.org":
        return "Error parsing message entity from entities array."
    citations = root.get("citation", [])
    if not isinstance(citations, list):
        return "Error parsing message entity from entities array."
    if len(citations) > MAX_CITATIONS:
        return f"Bot message with more than {MAX_CITATIONS} citations."
    positions: set[int] = set()
    for number, claim in enumerate(citations):
        problem = f"Error while parsing citation entity with ID: {number}."
        if not isinstance(claim, dict) or claim.get("@type") != "Claim":
            return problem
        appearance = claim.get("appearance")
        if not appearance:
            return "The appearance object is empty."
        position = claim.get("position")
        if not isinstance(position, int) or isinstance(position, bool) or position in positions:
            return problem
        positions.add(position)
        if not _appearance_ok(appearance):
            return problem
    return None


def _appearance_ok(appearance: Any) -> bool:
    if not isinstance(appearance, dict) or appearance.get("@type") != "DigitalDocument":
        return False
    name, summary = appearance.get("name"), appearance.get("abstract", "")
    keywords = appearance.get("keywords", [])
    return (
        isinstance(name, str)
        and 0 < len(name) <= CITATION_NAME_CHARS
        and isinstance(summary, str)
        and len(summary) <= CITATION_ABSTRACT_CHARS
        and isinstance(appearance.get("url", ""), str)
        and isinstance(keywords, list)
        and len(keywords) <= 3
        and all(isinstance(k, str) and len(k) <= 28 for k in keywords)
    )


_CONNECTOR_PATH = re.compile(
    r"^(?P<prefix>/.*?)?/v3/conversations(?:/(?P<conversation>[^/]+)/activities"
    r"(?:/(?P<activity>[^/]+))?)?/?$"
)


def _channel_of(conversation_id: str) -> str:
    """A conversation id without its reply chain (``;messageid=...``)."""
    return conversation_id.split(";", 1)[0]


class FakeTeams:
    """State and behaviour of the fake; every method is safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.base_url = "http://127.0.0.1"  # set by FakeTeamsServer.start()
        self._reset_state()

    def reset(self) -> None:
        """Forget everything a test did (the server stays up)."""
        with self._lock:
            self._reset_state()

    def _reset_state(self) -> None:
        self.tokens: set[str] = set()
        self.tokens_issued = 0
        self.metadata_fetches = 0
        self.key_fetches = 0
        #: The kids the published key is listed under (change it to roll the keys).
        self.key_ids: list[str] = [KEY_ID]
        #: The channels the published key is endorsed for.
        self.endorsements: tuple[str, ...] = ("msteams", "skype")
        self.calls: list[TeamsCall] = []
        self.messages: dict[str, Posted] = {}  # id -> message, in posting order
        #: Conversations (prefixes) the bot was removed from: sends there get 403.
        self.removed_from: set[str] = set()
        #: How a send split into several messages is answered (see :data:`SplitAnswer`).
        self.split_answer: SplitAnswer = "202"
        #: Sends split into several messages so far.
        self.splits = 0
        #: The next this many sends are posted but answered ``202`` with no body whatever
        #: they hold (as MicrosoftDocs/bot-docs#2263 reports for a send to a conversation).
        self.unnamed_sends = 0
        self.files: dict[str, _File] = {}
        self.file_fetches: list[FileFetch] = []
        self._failures: dict[str, deque[_Failure]] = {}

    # -- test controls ---------------------------------------------------------------------
    def fail_next(
        self,
        kind: str,
        status: int,
        *,
        times: int = 1,
        retry_after: float | None = None,
        body: bytes | None = None,
        content_type: str = "application/json",
    ) -> None:
        """The next ``times`` calls of ``kind`` (one of :data:`FAILURE_KINDS`; ``send`` is
        both POST forms and create conversation) fail with HTTP ``status`` and create nothing.

        The body is ``body`` (``b""``: empty) with ``content_type``, or by default: for 5xx an
        HTML error page, for 429 Teams' ``TooManyRequests`` JSON (the identity platform's
        error for ``token``), else a JSON error. ``retry_after`` adds a ``Retry-After``
        header (seconds)."""
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown kind {kind!r}; one of {FAILURE_KINDS}")
        failure = _Failure(status, times, retry_after, body, content_type)
        with self._lock:
            self._failures.setdefault(kind, deque()).append(failure)

    def remove_bot(self, conversation_prefix: str) -> None:
        """The bot is no longer in the conversations starting with ``conversation_prefix``
        (uninstalled from the team, removed from the chat): sends there get 403
        ``BotNotInConversationRoster``."""
        with self._lock:
            self.removed_from.add(conversation_prefix)

    def expire_tokens(self) -> None:
        """Every access token issued so far stops working (401), as when they expire."""
        with self._lock:
            self.tokens.clear()

    def add_file(self, data: bytes, name: str) -> dict[str, Any]:
        """Keep a file a user sends the bot in a personal chat; returns the attachment Teams
        puts on that message ("Send and receive files": the file download info card, whose
        ``downloadUrl`` is a pre-authenticated address on this fake)."""
        key = uuid.uuid4().hex
        tempauth = secrets.token_urlsafe(24)
        with self._lock:
            self.files[key] = _File(data, name, tempauth)
        extension = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        return {
            "contentType": FILE_DOWNLOAD_INFO,
            "contentUrl": "https://contoso-my.sharepoint.com/personal/u/Documents/"
            f"Microsoft Teams Chat Files/{name}",
            "name": name,
            "content": {
                "downloadUrl": f"{self.base_url}/files/{key}?tempauth={tempauth}",
                "uniqueId": str(uuid.uuid4()),
                "fileType": extension,
            },
        }

    # -- reading what happened ------------------------------------------------------------------
    def calls_to(self, kind: str) -> list[TeamsCall]:
        """The calls of one kind (see :attr:`TeamsCall.kind`), in order."""
        with self._lock:
            return [c for c in self.calls if c.kind == kind]

    def posted(self, conversation_prefix: str) -> list[Posted]:
        """Every message posted to a conversation whose id starts with ``conversation_prefix``
        (a channel's id covers its reply chains), in posting order."""
        with self._lock:
            return [
                m
                for m in self.messages.values()
                if m.conversation_id.startswith(conversation_prefix)
            ]

    def chain(self, channel_id: str, root_id: str) -> list[Posted]:
        """The messages of one reply chain of a channel, in order, without its root: those
        posted to ``f"{channel_id};messageid={root_id}"`` or replying to ``root_id`` there."""
        addressed = f"{channel_id};messageid={root_id}"
        with self._lock:
            return [
                m
                for m in self.messages.values()
                if m.id != root_id
                and (
                    m.conversation_id == addressed
                    or (_channel_of(m.conversation_id) == channel_id and m.reply_to == root_id)
                )
            ]

    def chat(self, conversation_id: str) -> list[Posted]:
        """The messages posted to exactly ``conversation_id`` (a personal or group chat)."""
        with self._lock:
            return [m for m in self.messages.values() if m.conversation_id == conversation_id]

    # -- serving -----------------------------------------------------------------------------
    def _take_failure(self, kind: str) -> Answer | None:
        """The answer of an injected failure of ``kind``, if one is due (lock held)."""
        queue = self._failures.get(kind)
        if not queue:
            return None
        failure = queue[0]
        failure.remaining -= 1
        if failure.remaining <= 0:
            queue.popleft()
        headers = {}
        if failure.retry_after is not None:
            headers["Retry-After"] = _retry_after(failure.retry_after)
        if failure.body is not None:
            return Answer(failure.status, failure.body, failure.content_type, headers)
        phrase = HTTPStatus(failure.status).phrase
        if failure.status >= 500:
            page = f"<html><body><h1>{failure.status} {phrase}</h1></body></html>"
            return Answer(failure.status, page.encode(), "text/html", headers)
        if kind == "token":
            answer = _aad_error(
                failure.status,
                "temporarily_unavailable" if failure.status == 429 else "invalid_request",
                50196 if failure.status == 429 else 900144,
                "The server encountered an error processing the request (injected).",
            )
        elif failure.status == 429:
            answer = _connector_error(429, "TooManyRequests", "Too many requests (injected).")
        else:
            answer = _connector_error(failure.status, phrase.replace(" ", ""), "Injected.")
        return Answer(answer.status, answer.body, answer.content_type, headers)

    def metadata(self, base: str) -> Answer:
        """The OpenID metadata (https://login.botframework.com/v1/.well-known/openidconfiguration)."""
        with self._lock:
            self.metadata_fetches += 1
            if (failure := self._take_failure("metadata")) is not None:
                return failure
        return _json(
            200,
            {
                "issuer": ISSUER,
                "authorization_endpoint": "https://invalid.botframework.com",
                "jwks_uri": f"{base}/openid/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            },
        )

    def keys(self) -> Answer:
        """The keys document: the published key under each of :attr:`key_ids`."""
        with self._lock:
            self.key_fetches += 1
            if (failure := self._take_failure("keys")) is not None:
                return failure
            kids, endorsements = list(self.key_ids), self.endorsements
        return _json(200, {"keys": [published_jwk(kid, endorsements) for kid in kids]})

    def token(self, path: str, form: dict[str, str]) -> Answer:
        """The identity platform's client-credentials grant."""
        with self._lock:
            self.calls.append(TeamsCall("POST", path, "", None, dict(form), "", kind="token"))
            if (failure := self._take_failure("token")) is not None:
                return failure
            grant = form.get("grant_type")
            if not grant or not form.get("client_id"):
                return _aad_error(
                    400,
                    "invalid_request",
                    900144,
                    "The request body must contain the following parameter: 'grant_type'."
                    if not grant
                    else "The request body must contain the following parameter: 'client_id'.",
                )
            if grant != "client_credentials":
                return _aad_error(
                    400,
                    "unsupported_grant_type",
                    70003,
                    "The app requested an unsupported grant type.",
                )
            if form.get("client_id") != APP_ID:
                return _aad_error(
                    400,
                    "unauthorized_client",
                    700016,
                    f"Application with identifier '{form.get('client_id')}' was not found in "
                    "the directory.",
                )
            if form.get("client_secret") != APP_PASSWORD:
                return _aad_error(
                    401,
                    "invalid_client",
                    7000215,
                    "Invalid client secret provided. Ensure the secret being sent in the "
                    "request is the client secret value, not the client secret ID, for a "
                    f"secret added to app '{APP_ID}'.",
                )
            if form.get("scope") != SCOPE:
                return _aad_error(
                    400,
                    "invalid_scope",
                    70011,
                    f"The provided request must include a 'scope' input parameter. The "
                    f"provided value for the input parameter 'scope' is not valid: "
                    f"{form.get('scope')!r}.",
                )
            token = secrets.token_urlsafe(48)
            self.tokens.add(token)
            self.tokens_issued += 1
        return _json(
            200,
            {
                "token_type": "Bearer",
                "expires_in": 3599,
                "ext_expires_in": 3599,
                "access_token": token,
            },
        )

    def connector(self, method: str, raw_path: str, raw: bytes, authorization: str) -> Answer:
        """One Bot Connector REST call (``raw_path`` as sent, percent-encoding and all)."""
        match = _CONNECTOR_PATH.match(raw_path)
        conversation = unquote(match["conversation"]) if match and match["conversation"] else ""
        activity = unquote(match["activity"]) if match and match["activity"] else None
        kind = "other"
        if match and conversation and method == "POST":
            kind = "send"
        elif match and conversation and activity and method in ("PUT", "DELETE"):
            kind = {"PUT": "update", "DELETE": "delete"}[method]
        elif match and not conversation and method == "POST":
            kind = "create"
        scheme, _, token = authorization.partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        body: dict[str, Any] = {}
        problem = ""
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                body = parsed
            else:
                problem = "The request body is not a JSON object."
        with self._lock:
            self.calls.append(
                TeamsCall(method, raw_path, conversation, activity, body, token, kind=kind)
            )
            if token not in self.tokens:
                return _connector_error(
                    401, "Unauthorized", "Authorization has been denied for this request."
                )
            if kind == "other":
                return _connector_error(404, "NotFound", f"No such API: {method} {raw_path}")
            failure = self._take_failure("send" if kind == "create" else kind)
            if failure is not None:
                return failure
            if problem:
                return _connector_error(400, "BadSyntax", problem)
            if len(raw) > MAX_ACTIVITY_BYTES:
                return _connector_error(413, "MessageSizeTooBig", "Message size too big")
            sent = body.get("activity") if kind == "create" else body
            refused = entity_problem(sent) if isinstance(sent, dict) else None
            if refused is not None:
                return _connector_error(400, "BadArgument", refused)
            if kind == "create":
                return self._create(body)
            if any(conversation.startswith(p) for p in self.removed_from):
                return _connector_error(
                    403,
                    "BotNotInConversationRoster",
                    "The bot is not part of the conversation roster.",
                )
            if kind == "send":
                return self._send(conversation, activity, body)
            return self._change(kind, conversation, activity or "", body)

    def _post(self, conversation: str, reply_to: str | None, body: dict[str, Any]) -> Posted:
        message = Posted(new_activity_id(), conversation, reply_to, [body])
        self.messages[message.id] = message
        return message

    def _send(self, conversation: str, activity: str | None, body: dict[str, Any]) -> Answer:
        """Send (or reply): one message, answered ``201`` with its id; or, for an activity
        Teams splits (:func:`split_activity`), each piece posted and the answer without an
        id (:attr:`split_answer`)."""
        if not isinstance(body.get("type"), str) or not body["type"]:
            return _connector_error(400, "BadArgument", "Activity type is required.")
        reply_to = activity or (str(body["replyToId"]) if body.get("replyToId") else None)
        pieces = split_activity(body)
        posted = [self._post(conversation, reply_to, piece) for piece in pieces]
        if len(pieces) == 1:
            if self.unnamed_sends <= 0:
                return _json(201, {"id": posted[0].id})
            self.unnamed_sends -= 1
            return Answer(202, b"", None)
        self.splits += 1
        if self.split_answer == "empty id":
            return _json(200, {"id": ""})
        return Answer(202, b"", None)

    def _create(self, body: dict[str, Any]) -> Answer:
        """Create conversation: a new post in a channel (``channelData.channel.id``), or a
        personal chat with ``members`` (answered without an activity id if none was sent)."""
        channel = (body.get("channelData") or {}).get("channel") or {}
        members = body.get("members") or []
        activity = body.get("activity")
        if channel.get("id"):
            conversation = str(channel["id"])
        elif members and isinstance(members[0], dict) and members[0].get("id"):
            conversation = f"a:1{uuid.uuid5(uuid.NAMESPACE_URL, str(members[0]['id'])).hex}"
        else:
            return _connector_error(
                400, "BadArgument", "A channel (channelData.channel.id) or members are required."
            )
        if any(conversation.startswith(p) for p in self.removed_from):
            return _connector_error(
                403, "BotNotInConversationRoster", "The bot is not part of the conversation roster."
            )
        if not isinstance(activity, dict):
            if channel.get("id"):
                return _connector_error(400, "BadArgument", "An activity is required.")
            return _json(201, {"id": conversation})
        root = self._post(conversation, None, activity)
        if channel.get("id"):
            return _json(201, {"id": f"{conversation};messageid={root.id}", "activityId": root.id})
        return _json(201, {"id": conversation, "activityId": root.id})

    def _change(self, kind: str, conversation: str, activity: str, body: dict[str, Any]) -> Answer:
        """Update or delete a message. What Teams answers for one that is not there, as
        microsoft/BotFramework-Services#269 reports it (a Microsoft engineer's tries): an id
        the thread never had, ``ActivityNotFoundInConversation`` "Message does not exist in the
        thread." (msteams-docs#6139 shows the same body; neither names its status: 404 here);
        a message that existed and was deleted, ``403`` ``ServiceError`` "Unknown"."""
        message = self.messages.get(activity)
        if message is None or _channel_of(message.conversation_id) != _channel_of(conversation):
            return _connector_error(
                404, "ActivityNotFoundInConversation", "Message does not exist in the thread."
            )
        if message.deleted:
            return _connector_error(403, "ServiceError", "Unknown")
        if kind == "delete":
            message.deleted = True
            return Answer(200)
        if not isinstance(body.get("type"), str) or not body["type"]:
            return _connector_error(400, "BadArgument", "Activity type is required.")
        message.versions.append(body)
        return _json(200, {"id": activity})

    def serve_file(self, key: str, tempauth: str, headers: dict[str, str]) -> Answer:
        """A GET of a file's pre-authenticated address."""
        with self._lock:
            answer = self._take_failure("file")
            if answer is None:
                file = self.files.get(key)
                if file is None:
                    answer = _json(404, {"error": {"code": "itemNotFound", "message": "Not found"}})
                elif "authorization" in headers or not secrets.compare_digest(
                    tempauth, file.tempauth
                ):
                    answer = _json(
                        401,
                        {
                            "error_description": "Invalid JWT token. The token is not in a "
                            "valid format, or the request carries another authorization."
                        },
                    )
                else:
                    disposition = f"attachment; filename*=UTF-8''{quote(file.name, safe='')}"
                    answer = Answer(
                        200,
                        file.data,
                        "application/octet-stream",
                        {"Content-Disposition": disposition},
                    )
            self.file_fetches.append(FileFetch(key, dict(headers), answer.status))
            return answer


def build_teams_app(fake: FakeTeams) -> Starlette:
    """The fake's HTTP routes over ``fake``."""

    def base(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    async def metadata(request: Request) -> Response:
        return fake.metadata(base(request)).response()

    async def keys(request: Request) -> Response:
        return fake.keys().response()

    async def token(request: Request) -> Response:
        form = {k: v[-1] for k, v in parse_qs((await request.body()).decode()).items()}
        return fake.token(request.url.path, form).response()

    async def file(request: Request) -> Response:
        headers = {k.lower(): v for k, v in request.headers.items()}
        tempauth = request.query_params.get("tempauth", "")
        return fake.serve_file(request.path_params["key"], tempauth, headers).response()

    async def connector(request: Request) -> Response:
        raw_path = request.scope.get("raw_path") or request.url.path.encode()
        path = raw_path.decode("latin-1").split("?", 1)[0]
        authorization = request.headers.get("authorization", "")
        return fake.connector(request.method, path, await request.body(), authorization).response()

    return Starlette(
        routes=[
            Route("/openid/.well-known/openidconfiguration", metadata, methods=["GET"]),
            Route("/openid/keys", keys, methods=["GET"]),
            Route("/{tenant}/oauth2/v2.0/token", token, methods=["POST"]),
            Route("/files/{key}", file, methods=["GET"]),
            Route("/{path:path}", connector, methods=["GET", "POST", "PUT", "DELETE"]),
        ]
    )


class FakeTeamsServer(BackgroundServer):
    """The fake served on a loopback port; ``.fake`` is its :class:`FakeTeams`."""

    def __init__(
        self, fake: FakeTeams | None = None, host: str = "127.0.0.1", port: int = 0
    ) -> None:
        self.fake = fake or FakeTeams()
        super().__init__(build_teams_app(self.fake), host, port)

    @property
    def service_url(self) -> str:
        """The ``serviceUrl`` of the activities this fake's Teams sends."""
        return f"{self.url}{SERVICE_PATH}"

    @property
    def metadata_url(self) -> str:
        """The OpenID metadata's address (``TEAMS_OPENID_METADATA_URL``)."""
        return f"{self.url}/openid/.well-known/openidconfiguration"

    def token_url(self, tenant: str = "botframework.com") -> str:
        """The token endpoint of ``tenant`` (``TEAMS_TOKEN_URL``)."""
        return f"{self.url}/{tenant}/oauth2/v2.0/token"

    def start(self, timeout: float = 5.0) -> FakeTeamsServer:
        super().start(timeout)
        self.fake.base_url = self.url
        return self

    def reset(self) -> None:
        """The fake as it was when it started: ``FakeTeams.reset``, and its address its own
        again (a test may point it elsewhere)."""
        self.fake.reset()
        self.fake.base_url = self.url


# -- activities, built as Teams sends them -----------------------------------------------------


def service_url_for(fake_url: str) -> str:
    """The ``serviceUrl`` of activities from the fake at ``fake_url`` (a service URL already
    ending in :data:`SERVICE_PATH` is kept)."""
    if fake_url.endswith(SERVICE_PATH):
        return fake_url
    return fake_url.rstrip("/") + SERVICE_PATH


def _timestamps() -> dict[str, str]:
    now = datetime.now(UTC)
    local = now.astimezone(timezone(timedelta(hours=-7)))
    return {
        "timestamp": now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "localTimestamp": local.isoformat(timespec="microseconds"),
    }


def _account(user_id: str, user_name: str, aad_id: str | None) -> dict[str, Any]:
    account: dict[str, Any] = {"id": user_id, "name": user_name}
    if aad_id is not None:
        account["aadObjectId"] = aad_id
    return account


def _mentioned_text(
    text: str, mention: bool, others: list[tuple[str, str]]
) -> tuple[str, list[dict[str, Any]]]:
    """The text with its ``<at>`` mentions in front, and their entities."""
    named = ([(BOT_ID, BOT_NAME)] if mention else []) + list(others)
    entities = [
        {"type": "mention", "text": f"<at>{name}</at>", "mentioned": {"id": id_, "name": name}}
        for id_, name in named
    ]
    prefix = " ".join(f"<at>{name}</at>" for _, name in named)
    return (f"{prefix} {text}" if prefix else text), entities


def _html_copy(text: str, mention: bool, others: list[tuple[str, str]]) -> dict[str, Any]:
    named = ([BOT_NAME] if mention else []) + [name for _, name in others]
    prefix = "&nbsp;".join(f"<at>{html.escape(name)}</at>" for name in named)
    body = html.escape(text)
    return {
        "contentType": "text/html",
        "content": f"<p>{prefix}&nbsp;{body}</p>" if prefix else f"<p>{body}</p>",
    }


def _message(
    fake_url: str,
    text: str,
    *,
    activity_id: str,
    conversation: dict[str, Any],
    channel_data: dict[str, Any],
    mention: bool,
    other_mentions: list[tuple[str, str]],
    attachments: list[dict[str, Any]],
    user_id: str,
    user_name: str,
    aad_id: str | None,
    locale: str,
    reply_to_id: str | None = None,
) -> dict[str, Any]:
    full_text, entities = _mentioned_text(text, mention, other_mentions)
    entities.append(
        {
            "type": "clientInfo",
            "locale": locale,
            "country": locale.rsplit("-", 1)[-1],
            "platform": "Web",
            "timezone": "America/Los_Angeles",
        }
    )
    copies = [_html_copy(text, mention, other_mentions)] if text or mention else []
    activity: dict[str, Any] = {
        "text": full_text,
        "textFormat": "plain",
        "attachments": copies + list(attachments),
        "type": "message",
        **_timestamps(),
        "id": activity_id,
        "channelId": "msteams",
        "serviceUrl": service_url_for(fake_url),
        "from": _account(user_id, user_name, aad_id),
        "conversation": conversation,
        "recipient": {"id": BOT_ID, "name": BOT_NAME},
        "entities": entities,
        "channelData": channel_data,
        "locale": locale,
        "localTimezone": "America/Los_Angeles",
    }
    if reply_to_id is not None:
        activity["replyToId"] = reply_to_id
    return activity


def _team_channel_data(team_id: str, channel_id: str, tenant: str) -> dict[str, Any]:
    return {
        "teamsChannelId": channel_id,
        "teamsTeamId": team_id,
        "channel": {"id": channel_id},
        "team": {"id": team_id},
        "tenant": {"id": tenant},
    }


def channel_message(
    fake_url: str,
    /,
    text: str,
    *,
    mention: bool = True,
    activity_id: str | None = None,
    root_id: str | None = None,
    user_id: str = USER_ID,
    user_name: str = USER_NAME,
    aad_id: str | None = AAD_ID,
    team_id: str = TEAM_ID,
    channel_id: str = CHANNEL_ID,
    tenant: str = TENANT,
    locale: str = "en-US",
    other_mentions: list[tuple[str, str]] | None = None,
    attachments: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    """A message in a team's channel ("Channel and group chat conversations with a bot"):
    a new post (its conversation id ``f"{channel_id};messageid={activity_id}"``) or, with
    ``root_id``, a reply in that post's chain (``replyToId`` the root). With ``mention`` the
    text starts ``<at>Fathom</at>`` and a mention entity names the bot; ``other_mentions``
    (id, name) mention people too. ``aad_id`` None leaves ``from.aadObjectId`` out."""
    activity_id = activity_id or new_activity_id()
    conversation = {
        "isGroup": True,
        "conversationType": "channel",
        "tenantId": tenant,
        "id": f"{channel_id};messageid={root_id or activity_id}",
    }
    return _message(
        fake_url,
        text,
        activity_id=activity_id,
        conversation=conversation,
        channel_data=_team_channel_data(team_id, channel_id, tenant),
        mention=mention,
        other_mentions=list(other_mentions or []),
        attachments=list(attachments),
        user_id=user_id,
        user_name=user_name,
        aad_id=aad_id,
        locale=locale,
        reply_to_id=root_id,
    )


def group_chat_message(
    fake_url: str,
    /,
    text: str,
    *,
    mention: bool = True,
    activity_id: str | None = None,
    chat_id: str = GROUP_CHAT,
    user_id: str = USER_ID,
    user_name: str = USER_NAME,
    aad_id: str | None = AAD_ID,
    tenant: str = TENANT,
    locale: str = "en-US",
    other_mentions: list[tuple[str, str]] | None = None,
    attachments: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    """A message in a group chat ("Channel and group chat conversations with a bot"):
    conversation type ``groupChat``, the chat's id, no reply chains."""
    conversation = {
        "isGroup": True,
        "conversationType": "groupChat",
        "tenantId": tenant,
        "id": chat_id,
    }
    return _message(
        fake_url,
        text,
        activity_id=activity_id or new_activity_id(),
        conversation=conversation,
        channel_data={"tenant": {"id": tenant}},
        mention=mention,
        other_mentions=list(other_mentions or []),
        attachments=list(attachments),
        user_id=user_id,
        user_name=user_name,
        aad_id=aad_id,
        locale=locale,
    )


def personal_message(
    fake_url: str,
    /,
    text: str,
    *,
    mention: bool = False,
    activity_id: str | None = None,
    conversation_id: str = PERSONAL_CHAT,
    attachments: list[dict[str, Any]] | tuple[dict[str, Any], ...] = (),
    user_id: str = USER_ID,
    user_name: str = USER_NAME,
    aad_id: str | None = AAD_ID,
    tenant: str = TENANT,
    locale: str = "en-US",
) -> dict[str, Any]:
    """A message in the bot's personal (one-to-one) chat ("Conversation basics"; with files
    from :meth:`FakeTeams.add_file` in ``attachments``, "Send and receive files"). A mention
    of the bot is not needed there, but the client may add one (``mention``)."""
    conversation = {"conversationType": "personal", "tenantId": tenant, "id": conversation_id}
    return _message(
        fake_url,
        text,
        activity_id=activity_id or new_activity_id(),
        conversation=conversation,
        channel_data={"tenant": {"id": tenant}},
        mention=mention,
        other_mentions=[],
        attachments=list(attachments),
        user_id=user_id,
        user_name=user_name,
        aad_id=aad_id,
        locale=locale,
    )


def from_bot(
    fake_url: str,
    /,
    text: str,
    *,
    bot_id: str = "28:other-bot",
    bot_name: str = "Other Bot",
    **kwargs: Any,
) -> dict[str, Any]:
    """A channel message sent by another bot ("Conversation basics": bots' ids start with
    ``28:``, and they have no ``aadObjectId``); ``kwargs`` go to :func:`channel_message`."""
    return channel_message(
        fake_url, text, user_id=bot_id, user_name=bot_name, aad_id=None, **kwargs
    )


def action_invoke(
    fake_url: str,
    /,
    *,
    verb: str,
    data: dict[str, Any],
    reply_to_id: str,
    conversation: dict[str, Any],
    user_id: str = USER_ID,
    user_name: str = USER_NAME,
    aad_id: str | None = AAD_ID,
    team_id: str = TEAM_ID,
    tenant: str = TENANT,
    locale: str = "en-US",
) -> dict[str, Any]:
    """A press on an ``Action.Execute`` button of the card ``reply_to_id`` ("Universal
    Actions for Adaptive Cards": the ``adaptiveCard/action`` invoke, which the bot answers
    in the HTTP response). ``conversation`` is the conversation object of the card's chat
    (a message's ``"conversation"``); in a channel the channel data names the team too."""
    if conversation.get("conversationType") == "channel":
        channel_data = _team_channel_data(team_id, _channel_of(str(conversation["id"])), tenant)
    else:
        channel_data = {"tenant": {"id": tenant}}
    channel_data["source"] = {"name": "message"}
    return {
        "name": "adaptiveCard/action",
        "type": "invoke",
        **_timestamps(),
        "id": f"f:{uuid.uuid4()}",
        "channelId": "msteams",
        "serviceUrl": service_url_for(fake_url),
        "from": _account(user_id, user_name, aad_id),
        "conversation": dict(conversation),
        "recipient": {"id": BOT_ID, "name": BOT_NAME},
        "entities": [
            {"type": "clientInfo", "locale": locale, "platform": "Web", "timezone": "UTC"}
        ],
        "channelData": channel_data,
        "replyToId": reply_to_id,
        "value": {
            "action": {"type": "Action.Execute", "verb": verb, "data": data},
            "trigger": "manual",
        },
        "locale": locale,
    }


Scope = Literal["team", "personal", "groupChat"]


def _where(
    scope: Scope, team_id: str, conversation_id: str, chat_id: str, tenant: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The conversation and channel data of an event in a team (its General channel, whose
    id is the team's), a personal chat or a group chat."""
    if scope == "team":
        conversation = {
            "isGroup": True,
            "conversationType": "channel",
            "tenantId": tenant,
            "id": team_id,
        }
        channel_data: dict[str, Any] = {
            "team": {"id": team_id, "name": "Research", "aadGroupId": str(uuid.uuid4())},
            "tenant": {"id": tenant},
        }
    elif scope == "groupChat":
        conversation = {
            "isGroup": True,
            "conversationType": "groupChat",
            "tenantId": tenant,
            "id": chat_id,
        }
        channel_data = {"tenant": {"id": tenant}}
    else:
        conversation = {"conversationType": "personal", "tenantId": tenant, "id": conversation_id}
        channel_data = {"tenant": {"id": tenant}}
    return conversation, channel_data


def _event(
    fake_url: str, kind: str, conversation: dict[str, Any], channel_data: dict[str, Any]
) -> dict[str, Any]:
    return {
        "type": kind,
        **_timestamps(),
        "id": f"f:{uuid.uuid4()}",
        "channelId": "msteams",
        "serviceUrl": service_url_for(fake_url),
        "from": _account(USER_ID, USER_NAME, AAD_ID),
        "conversation": conversation,
        "recipient": {"id": BOT_ID, "name": BOT_NAME},
        "channelData": channel_data,
    }


def installation_update(
    fake_url: str,
    /,
    *,
    action: Literal["add", "remove"] = "add",
    scope: Scope = "team",
    team_id: str = TEAM_ID,
    conversation_id: str = PERSONAL_CHAT,
    chat_id: str = GROUP_CHAT,
    tenant: str = TENANT,
) -> dict[str, Any]:
    """The app installed in (``add``) or removed from (``remove``) a team, a personal chat
    or a group chat ("Conversation events in your Teams bot": ``installationUpdate``)."""
    conversation, channel_data = _where(scope, team_id, conversation_id, chat_id, tenant)
    channel_data["source"] = {"name": "message"}
    if scope == "team":
        channel_data["settings"] = {"selectedChannel": {"id": team_id}}
    activity = _event(fake_url, "installationUpdate", conversation, channel_data)
    activity["action"] = action
    return activity


def conversation_update_bot_added(
    fake_url: str,
    /,
    *,
    scope: Scope = "team",
    team_id: str = TEAM_ID,
    conversation_id: str = PERSONAL_CHAT,
    chat_id: str = GROUP_CHAT,
    tenant: str = TENANT,
) -> dict[str, Any]:
    """The bot added to a team, a personal chat or a group chat ("Conversation events in
    your Teams bot": ``conversationUpdate`` with the bot in ``membersAdded``; in a team the
    event type ``teamMemberAdded``)."""
    conversation, channel_data = _where(scope, team_id, conversation_id, chat_id, tenant)
    if scope == "team":
        channel_data["eventType"] = "teamMemberAdded"
    activity = _event(fake_url, "conversationUpdate", conversation, channel_data)
    activity["membersAdded"] = [{"id": BOT_ID}]
    return activity


def conversation_update_bot_removed(
    fake_url: str,
    /,
    *,
    scope: Scope = "team",
    team_id: str = TEAM_ID,
    conversation_id: str = PERSONAL_CHAT,
    chat_id: str = GROUP_CHAT,
    tenant: str = TENANT,
) -> dict[str, Any]:
    """The bot removed from a team or a group chat ("Conversation events in your Teams bot",
    "Team members removed": a ``conversationUpdate`` whose ``membersRemoved`` holds the
    bot's own id, the recipient's; in a team the conversation is the team's and the event
    type ``teamMemberRemoved``)."""
    conversation, channel_data = _where(scope, team_id, conversation_id, chat_id, tenant)
    if scope == "team":
        channel_data["eventType"] = "teamMemberRemoved"
    activity = _event(fake_url, "conversationUpdate", conversation, channel_data)
    activity["membersRemoved"] = [{"id": BOT_ID}]
    return activity


def sign(
    activity: dict[str, Any],
    *,
    key: Literal["published", "forger"] = "published",
    audience: str = APP_ID,
    issuer: str = ISSUER,
    expires_in: float = 3600,
    issued_ago: float = 0,
    service_url: str | None = None,
    kid: str = KEY_ID,
) -> str:
    """The ``Authorization`` header the Bot Connector sends ``activity`` with ("Authenticate
    requests from the Bot Connector service to your bot"): ``Bearer`` and an RS256 JWT with
    the header ``kid`` / ``x5t`` and the claims ``serviceurl`` (the activity's ``serviceUrl``
    unless ``service_url``), ``nbf``, ``exp``, ``iss``, ``aud``."""
    issued = time.time() - issued_ago
    claims = {
        "serviceurl": activity["serviceUrl"] if service_url is None else service_url,
        "nbf": int(issued),
        "exp": int(issued + expires_in),
        "iss": issuer,
        "aud": audience,
    }
    token = jwt.encode(
        claims,
        signing_key(key),
        algorithm="RS256",
        headers={"kid": kid, "typ": "JWT", "x5t": kid},
    )
    return f"Bearer {token}"
