"""What Slack refused for good in this process, so it is not asked again for every edit.

A workspace that does not take plan blocks (its plan, an older Slack) gets progress messages
without them; a workspace or channel that does not take the thread status (the scope missing,
a channel where it cannot be set) gets none; a workspace that refuses canvases (the
``canvases:write`` scope missing, a free plan, canvases turned off) gets its long reports as
parts; a workspace or channel that refuses Slack's agent sessions (``agents.sessions.*``: the
app not declared as an agent, an older Slack, the token) gets the assistant thread status
alone (``bots.slack.status``). Only an answer Slack says is final is remembered
(``bots.slack.errors.classify_error``; for sessions, any deliberate refusal,
``bots.slack.sessions.is_refusal``); each is logged once, and so is each warning of an ``ok``
answer. The memory belongs to the process's Slack delivery (one object, shared by its runs),
not to the database: a restarted process asks once more.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: Refusals that hold for the whole workspace (the token or the app), not one channel.
WORKSPACE_REFUSALS = frozenset(
    {
        "missing_scope",
        "not_allowed_token_type",
        "no_permission",
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "team_access_not_granted",
        "feature_not_enabled",
        "method_deprecated",
        "unknown_method",
    }
)

#: Answers that mean the status cannot be set in that channel, besides the final errors
#: every call has (``bots.slack.errors.FINAL_ERRORS``).
CHANNEL_REFUSALS = frozenset({"not_allowed"})
#: Answers about one thread only: its run shows no status, the channel's other runs do.
THREAD_REFUSALS = frozenset(
    {"invalid_thread_ts", "thread_not_found", "message_not_found", "cannot_reply_to_message"}
)


class SlackRefusals:
    """What Slack refused for good in this process: plan blocks per workspace, the thread
    status per workspace or channel, canvases per workspace. Each refusal is logged once."""

    def __init__(self) -> None:
        self._plans: set[str] = set()
        self._status: set[str] = set()
        self._canvases: set[str] = set()
        self._sessions: set[str] = set()
        self._warnings: set[tuple[str, str]] = set()

    def plans_refused(self, team: str) -> bool:
        return team in self._plans

    def refuse_plans(self, team: str, why: str) -> None:
        if team not in self._plans:
            self._plans.add(team)
            log.warning(
                "slack: workspace %s refused plan blocks (%s); progress is shown without them",
                team,
                why,
            )

    def status_refused(self, team: str, channel: str) -> bool:
        return team in self._status or f"{team}:{channel}" in self._status

    def refuse_status(self, team: str, channel: str, code: str) -> None:
        """Slack refused the status with ``code``: for the workspace when the code says so
        (:data:`WORKSPACE_REFUSALS`), else for the channel."""
        key = team if code in WORKSPACE_REFUSALS else f"{team}:{channel}"
        if key not in self._status:
            self._status.add(key)
            where = f"workspace {team}" if key == team else f"channel {channel} of {team}"
            log.warning(
                "slack: %s refused the thread status (%s); runs there show progress only",
                where,
                code or "no error code",
            )

    def canvases_refused(self, team: str) -> bool:
        return team in self._canvases

    def refuse_canvases(self, team: str) -> None:
        """The workspace refused canvases for good (``bots.slack.canvas``): its long reports
        go as the thread's usual parts, without asking again. Not logged here: the delivery
        that met the refusal logs it, once (``bots.chat.delivery``)."""
        self._canvases.add(team)

    def sessions_refused(self, team: str, channel: str) -> bool:
        return team in self._sessions or f"{team}:{channel}" in self._sessions

    def refuse_sessions(self, team: str, channel: str, code: str, *, channel_only: bool) -> None:
        """Slack refused ``agents.sessions.*`` with ``code``: in that channel only when
        ``channel_only``, else for the whole workspace (the app, the token or the plan)."""
        key = f"{team}:{channel}" if channel_only else team
        if key not in self._sessions:
            self._sessions.add(key)
            where = f"channel {channel} of {team}" if channel_only else f"workspace {team}"
            log.warning(
                "slack: %s refused agent sessions (%s); the thread status goes through "
                "assistant.threads.* there",
                where,
                code or "no error code",
            )

    def warn(self, team: str, method: str, warning: str) -> None:
        """A ``warning`` in one of Slack's ``ok`` answers: logged once per workspace."""
        if (team, warning) not in self._warnings:
            self._warnings.add((team, warning))
            log.warning("slack: %s in workspace %s warned: %s", method, team, warning[:200])
