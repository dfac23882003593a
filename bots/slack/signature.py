"""Slack's request signature (docs.slack.dev, "Verifying requests from Slack"):
``v0=`` + HMAC-SHA256 of ``v0:{timestamp}:{raw body}`` with the app's signing secret, in
``X-Slack-Signature``, the timestamp in ``X-Slack-Request-Timestamp`` within a 5-minute
window. Slack signs its Events API, interactivity and slash-command deliveries this way, and
the Slackbot MCP client's requests to a server of ``auth_type: slack_identity_auth``
(docs.slack.dev/ai/slackbot-mcp-client; slack-samples/bolt-js-examples,
``ai/slackbot-mcp-client/slack-identity``). No SDK is imported here.
"""

from __future__ import annotations

import hashlib
import hmac

#: Slack's replay window for signed requests (seconds).
SIGNATURE_WINDOW = 300


def signature_is_valid(
    secret: str, body: bytes, timestamp: str | None, signature: str | None, now: float
) -> bool:
    """Slack's request signature over the raw bytes; False for anything malformed."""
    if not secret or not timestamp or not signature:
        return False
    if not timestamp.isascii() or not timestamp.isdigit() or len(timestamp) > 12:
        return False
    if abs(now - int(timestamp)) > SIGNATURE_WINDOW:
        return False
    base = b"v0:" + timestamp.encode("ascii") + b":" + body
    expected = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace"))
