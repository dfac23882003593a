"""A small mutation check: does the test suite guard Fathom's central guarantees?

Each :class:`Mutant` below breaks one guarantee with one precise edit of production code (an
exact snippet ``old`` replaced by ``new``) and names the narrowest existing tests that should
notice. For each mutant the script copies the repository (its tracked files plus untracked
ones that are not ignored, as they are in the work tree now: uncommitted edits included) to a
throwaway folder, applies the edit there, and runs the repository's own pytest on the copy
(``PYTHONPATH`` is the copy, so its modules shadow the editable install). A mutant whose tests
fail is *killed*; one whose tests pass *survived*: the suite would not notice that bug.

Before the mutants, an unmutated copy must pass every selected test (else a test failing for
another reason would make every mutant look killed), and the copy's modules must be the ones
imported. Every ``old`` must occur exactly once in its file, checked first for every chosen
mutant, so the check fails loudly, naming each mutant whose code moved, instead of rotting
silently. ``--check-snippets`` does only that check, on the work tree, in a second: CI runs
it for every mutant, so a refactor that moves a guarded line fails CI until the mutant is
re-pointed; CI then runs the mutants of ``--ci`` (those whose tests are fast).

How to run (from the repository root; standard library only, pytest runs in ``.venv``)::

    python3 bench/mutations.py                  # the sanity run, then every mutant
    python3 bench/mutations.py --ci             # CI's subset (``ci=True``)
    python3 bench/mutations.py --check-snippets # only: is every snippet still there, once?
    python3 bench/mutations.py --list           # the mutants, what each breaks, its tests
    python3 bench/mutations.py --only ssrf      # one mutant (repeatable)
    python3 bench/mutations.py --timeout 900    # seconds per pytest run (default 600)
    python3 bench/mutations.py --keep           # keep the copies (their paths are printed)
    python3 bench/mutations.py --jobs 2         # two mutants at once (each its own pytest)

The tests run on SQLite; ``TEST_DATABASE_URL``, when set, is passed through, so the database
tests run on PostgreSQL too. ``PYTEST_ADDOPTS`` is not passed on. It prints a Markdown table
(guarantee | file | tests | CI | result | seconds | CPU seconds, the latter with ``--jobs 1``)
and exits 0 only when the sanity run passed and every mutant was killed; 1 otherwise (a
survivor, a timeout, a pytest error: the last line, on stderr, names each mutant not killed);
2 when a mutant's snippet is missing or not unique (a line on stderr per such mutant, naming
it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PYTHON = REPO / ".venv" / "bin" / "python"
PYTEST = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist")
#: The packages whose modules must come from the copy, not from the editable install.
PACKAGES = ("core", "bots", "storage")
TAIL_LINES = 40


@dataclass(frozen=True)
class Mutant:
    """One edit of production code that breaks ``name``'s guarantee, and its guarding tests."""

    name: str
    file: str  # relative to the repository
    old: str  # must occur exactly once in ``file``
    new: str
    tests: tuple[str, ...]  # pytest arguments: node ids or files, optionally "-k", "EXPR"
    breaks: str  # one line: what the edit breaks
    #: In CI's subset (``--ci``): False for a mutant whose tests take long (real processes,
    #: real waits), run by ``python3 dev.py mutants`` only.
    ci: bool = True


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        name="fencing",
        file="storage/claim_sql.py",
        old=(
            "        self.checkpoint_run = (\n"
            "            update(_runs)\n"
            "            .where(*_FENCE, _RUNNING)\n"
        ),
        new=(
            "        self.checkpoint_run = (\n"
            "            update(_runs)\n"
            '            .where(_runs.c.id == bindparam("run_id"), _RUNNING)\n'
        ),
        tests=(
            "tests/test_run_lifecycle.py::test_a_runner_whose_heartbeat_expired_loses_its_claim",
            "tests/test_run_lifecycle.py"
            "::test_a_stalled_runner_that_lost_its_run_stops_and_writes_nothing",
        ),
        breaks="a checkpoint is no longer fenced by owner and fence token: a runner whose "
        "claim was taken over still writes its steps",
    ),
    Mutant(
        name="redelivery",
        file="storage/runs.py",
        old='            "dedupe_key": dedupe_key,\n',
        new='            "dedupe_key": None,\n',
        tests=(
            "tests/test_storage.py::test_dedupe_key_yields_one_run",
            "tests/test_storage.py::test_concurrent_creates_with_one_dedupe_key_race_safely",
            "tests/test_slack_app.py::test_redelivered_command_at_the_limit_is_still_acknowledged",
            "tests/test_chat_layer.py::"
            "test_a_request_redelivered_after_a_crash_that_lost_its_record_makes_no_second_run",
        ),
        breaks="create_run stores no dedupe key: a delivery seen again is refused (thread "
        "busy, user limit) instead of getting its run, or makes a second run once it ended",
    ),
    Mutant(
        name="digest-slot",
        file="core/operations/digests.py",
        old="            dedupe_key=slot_key(digest.id, slot),\n",
        new="            dedupe_key=None,\n",
        tests=(
            "tests/test_digests.py::test_a_digest_whose_channel_refuses_its_posts_is_disabled",
            "tests/test_digests.py::test_a_due_slot_fires_once_and_posts_to_the_channel",
        ),
        breaks="a digest firing carries no slot key: only the busy thread stops a second "
        "firing of the slot, and once the first run ended a later tick fires it again",
    ),
    Mutant(
        name="citations",
        file="core/research/report.py",
        old='            removed += 1\n            return ""\n',
        new="            removed += 1\n            return match.group(0)\n",
        tests=("tests/test_report.py::test_unknown_numbers_are_dropped",),
        breaks="a citation to a number no search returned stays in the report",
    ),
    Mutant(
        name="ssrf",
        file="core/pages/fetch.py",
        old="    if allow_loopback and ip.is_loopback:\n",
        new="    if ip.is_loopback:\n",
        tests=("tests/test_pages.py::test_only_public_http_addresses_are_read",),
        breaks="loopback addresses (127.0.0.1, ::1) are fetched without FATHOM_ALLOW_PRIVATE_FETCH",
    ),
    Mutant(
        name="slack-signature",
        file="bots/slack/signature.py",
        old=(
            "    return hmac.compare_digest(expected.encode(), "
            'signature.encode("utf-8", "replace"))\n'
        ),
        new='    return signature.startswith("v0=")\n',
        tests=(
            "tests/test_slack_app.py::test_unverified_requests_get_401_and_store_nothing",
            "tests/test_slack_app.py::test_forged_and_foreign_presses_change_nothing",
            "tests/test_mcp_slack.py::test_unsigned_forged_or_stale_requests_are_401_and_start_nothing",
        ),
        breaks="any well-formed, fresh Slack signature is accepted, whatever secret made it "
        "(at /slack/events and, with Slack identity, at /mcp)",
    ),
    Mutant(
        name="feishu-signature",
        file="bots/feishu/events.py",
        old=(
            "    if not hmac.compare_digest(expected, signature.lower()):\n"
            '        raise Rejected(401, "invalid signature")\n'
        ),
        new="",
        tests=(
            "tests/test_feishu.py::test_forged_or_malformed_deliveries_get_4xx_and_store_nothing",
            "tests/test_feishu.py::test_forged_card_callbacks_get_4xx_or_change_nothing",
        ),
        breaks="a Feishu webhook's X-Lark-Signature is computed but never compared",
    ),
    Mutant(
        name="dingtalk-signature",
        file="bots/dingtalk/events.py",
        old=(
            "    if not hmac.compare_digest(expected_sign(timestamp, secret).encode(), "
            "sign.encode()):\n"
            '        raise Rejected(401, "invalid signature")\n'
        ),
        new="",
        tests=(
            "tests/test_dingtalk.py"
            "::test_a_bad_sign_or_a_stale_timestamp_is_rejected_and_nothing_is_stored",
        ),
        breaks="a DingTalk callback's sign is never compared: any fresh timestamp passes",
    ),
    Mutant(
        name="teams-token",
        file="bots/teams/auth.py",
        old='        signed_for = claims.get("serviceurl")\n',
        new="        signed_for = service_url\n",
        tests=(
            "tests/test_teams.py"
            "::test_unsigned_forged_expired_or_misaddressed_activities_get_401_and_store_nothing",
        ),
        breaks="a Teams token signed for another serviceUrl is taken: an activity names where "
        "the bot sends its own token",
    ),
    Mutant(
        name="cancel",
        file="core/research/execution.py",
        old="            is_cancelled=lambda: self.cancelled,\n",
        new="            is_cancelled=lambda: False,\n",
        tests=(
            "tests/test_engine.py::test_cancel_request_stops_the_run",
            "tests/test_engine.py::test_cancel_from_another_process_is_seen_at_the_next_checkpoint",
            "tests/test_chat_layer.py"
            "::test_cancel_in_the_thread_stops_its_run_and_the_message_ends_cancelled",
        ),
        breaks="the research strategies never see a cancel request: a cancelled run "
        "searches on and writes its report",
    ),
    Mutant(
        name="quota",
        file="storage/runs.py",
        old="    if quota.runs is not None and runs >= quota.runs:\n",
        new="    if quota.runs is not None and runs > quota.runs:\n",
        tests=(
            "tests/test_stop_and_budgets.py::test_the_daily_run_quota_is_counted_across_replicas",
        ),
        breaks="the daily run quota (FATHOM_USER_DAILY_RUNS) lets one run more a day",
    ),
    Mutant(
        name="admission-lock",
        file="storage/runs.py",
        old="                lock_admission(conn, dialect, requested_by)\n",
        new="                pass\n",
        tests=(
            "tests/test_admission.py::"
            "test_simultaneous_requests_on_two_replicas_admit_exactly_the_daily_runs",
            "tests/test_admission.py::"
            "test_simultaneous_requests_on_two_replicas_admit_exactly_the_concurrency",
        ),
        breaks="a user's requests racing on two replicas are counted without the admission "
        "lock: more than FATHOM_USER_DAILY_RUNS or FATHOM_USER_CONCURRENCY pass",
    ),
    Mutant(
        name="token-reservation",
        file="storage/runs.py",
        old="    left = quota.tokens - int(charged)\n",
        new="    left = quota.tokens - int(spent)\n",
        tests=(
            "tests/test_token_limits.py::"
            "test_simultaneous_requests_on_two_replicas_spend_at_most_the_daily_tokens",
        ),
        breaks="FATHOM_USER_DAILY_TOKENS counts only what finished runs spent: simultaneous "
        "requests all pass it",
    ),
    Mutant(
        name="writer-fitted",
        file="core/research/writer.py",
        old="request = fit_writer(numbered, build, room, ",
        new="request = fit_writer(numbered, build, None, ",
        tests=(
            "tests/test_token_limits.py::"
            "test_the_run_token_budget_bounds_the_whole_run_the_writer_and_the_check_included",
        ),
        breaks="the writer's request is not fitted into FATHOM_MAX_RUN_TOKENS: the run passes "
        "its budget",
    ),
    Mutant(
        name="knowledge-scope",
        file="core/knowledge/scope.py",
        old="        if prefix and all(prefix) and prefix == parts[: len(prefix)]:\n",
        new="        if thread_key.startswith(channel.strip()):\n",
        tests=("tests/test_knowledge.py::test_channels_are_thread_key_prefixes",),
        breaks="an MCP server's channels match as text, not component by component: "
        "slack:T1 also opens it to workspace T10",
    ),
    Mutant(
        name="statement-tools",
        file="core/knowledge/tools.py",
        old="        execution = executes(candidate)\n",
        new="        execution = None\n",
        tests=(
            "tests/test_mcp_real.py::test_a_duckdb_query_tool_is_never_chosen_by_itself",
            "tests/test_mcp_real.py::test_mcp_alchemy_offers_no_tool_that_searches",
        ),
        breaks="an MCP tool that runs SQL (mcp-server-duckdb's query(query)) is chosen by "
        "itself and runs the planner's text",
        ci=False,  # its tests start real MCP servers (seconds each)
    ),
    Mutant(
        name="statement-writes",
        file="core/knowledge/statements.py",
        old="    if written:\n",
        new="    if written and False:\n",
        tests=(
            "tests/test_mcp_real.py::test_with_read_only_a_named_tool_gets_reads_and_never_a_write",
            "tests/test_team_knowledge.py"
            "::test_a_planner_written_delete_never_reaches_the_teams_database",
        ),
        breaks="a planner-written DELETE reaches a statement tool allowed with "
        '"statements": "read-only"',
        ci=False,  # its tests start real MCP servers (seconds each)
    ),
    Mutant(
        name="allowed-users",
        file="bots/chat/settings.py",
        old="        if self.allowed_users and (user is None or user not in self.allowed_users):\n",
        new="        if self.allowed_users and user is None:\n",
        tests=(
            "tests/test_chat_layer.py"
            "::test_a_vote_is_stored_once_per_person_and_a_second_press_changes_it",
            "tests/test_slack_app.py::test_access_control_refuses_politely",
        ),
        breaks="FATHOM_ALLOWED_USERS admits everyone: a user not on the list starts research "
        "and presses a report's buttons",
    ),
    Mutant(
        name="allowed-channels",
        file="bots/chat/settings.py",
        old=(
            "        return not (\n"
            "            self.allowed_channels and (channel is None or channel not in "
            "self.allowed_channels)\n"
            "        )\n"
        ),
        new="        return True\n",
        tests=(
            "tests/test_chat_layer.py"
            "::test_the_allowed_channels_refuse_every_other_channel_but_not_an_admin",
        ),
        breaks="FATHOM_ALLOWED_CHANNELS admits every channel: a request in a channel not on "
        "the list makes a run",
    ),
    Mutant(
        name="internal-sources",
        file="core/knowledge/sources.py",
        old=(
            "        return [s for s in self.sources "
            "if channel_allows(s.spec.channels, thread_key)]\n"
        ),
        new="        return list(self.sources)\n",
        tests=(
            "tests/test_team_knowledge.py"
            "::test_a_channel_that_is_not_allowed_never_calls_the_server",
        ),
        breaks="every MCP server is searched in every thread, whatever channels it is "
        "configured for",
        ci=False,  # its tests start real MCP servers (seconds each)
    ),
    Mutant(
        name="stop-requester",
        file="bots/chat/inbound.py",
        old=(
            "        if run.requested_by != press.requested_by "
            "and not self._policy.is_admin(press.user):\n"
        ),
        new="        if run.requested_by != press.requested_by and False:\n",
        tests=(
            "tests/test_chat_layer.py"
            "::test_the_stop_button_is_the_requesters_and_the_final_message_has_no_buttons",
            "tests/test_chat_layer.py::test_the_cancel_button_ends_the_run_without_a_report",
        ),
        breaks="anyone in the channel may press a run's Stop or Cancel, not only the person "
        "who started it (or an admin)",
    ),
    Mutant(
        name="typed-requester",
        file="bots/chat/inbound.py",
        old=(
            "            if run.requested_by != by and not self._policy.is_admin(message.user):\n"
            '                return _Refusal("not_theirs")\n'
        ),
        new="",
        tests=(
            "tests/test_chat_layer.py"
            "::test_cancel_in_the_thread_stops_its_run_and_the_message_ends_cancelled",
            "tests/test_chat_layer.py"
            "::test_stop_typed_in_the_thread_ends_the_searching_and_the_report_follows",
        ),
        breaks="anyone in a research's thread may type cancel or stop for it, not only the "
        "person who started it (or an admin)",
    ),
    Mutant(
        name="report-parts",
        file="core/operations/job.py",
        old="        posted = min(claim.run.report_parts_posted, len(parts()))\n",
        new="        posted = 0\n",
        tests=(
            "tests/test_run_lifecycle.py"
            "::test_a_takeover_during_delivery_posts_only_the_missing_parts",
            "tests/test_run_lifecycle.py"
            "::test_a_shutdown_during_a_post_records_that_part_and_the_next_replica_goes_on",
        ),
        breaks="a delivery taken over or resumed posts the report from its first part again: "
        "the parts a runner before it posted appear twice",
    ),
    Mutant(
        name="report-document",
        file="core/operations/job.py",
        old="        delivery.claimed(claim.run)\n",
        new="        pass\n",
        tests=(
            "tests/test_report_documents.py"
            "::test_a_resumed_delivery_posts_the_summary_without_a_second_document",
        ),
        breaks="a delivery resumed from a record read before its claim forgets the document an "
        "earlier attempt made: the report's summary is never posted",
    ),
    Mutant(
        name="log-redaction",
        file="core/logs.py",
        old='        return self._secrets.sub(lambda m: m.group(0)[:5] + "…", text)\n',
        new="        return text\n",
        tests=(
            "tests/test_logs.py::test_a_json_line_carries_its_context_and_no_secret",
            "tests/test_untrusted.py::test_log_lines_never_show_credentials",
        ),
        breaks="log lines show credentials (OpenAI keys, bearer tokens, each platform's "
        "tokens) in full",
    ),
    Mutant(
        name="inert-text",
        file="core/untrusted.py",
        old="    return _BROADCAST_WORD.sub(lambda m: _AT + m.group(1), text)\n",
        new="    return text\n",
        tests=("tests/test_untrusted.py::test_every_mention_and_link_form_becomes_inert",),
        breaks="plain @channel, @here, @everyone, @all and @所有人 in untrusted text stay live "
        "mentions",
    ),
)


class MutantRotted(Exception):
    """A mutant's snippet is not exactly once in its file (the code moved on)."""


@dataclass(frozen=True)
class PytestRun:
    returncode: int | None  # None: timed out
    seconds: float
    output: str
    #: CPU seconds (user + system) of the processes it waited for: exact when one run is
    #: under way at a time (``--jobs 1``), a measure that the machine's load does not inflate.
    cpu: float = 0.0


def repository_files(repo: Path) -> list[str]:
    """The files of the work tree as it is: tracked ones (minus those deleted) and untracked
    ones that are not ignored."""
    listed = subprocess.run(
        ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode("utf-8", "surrogateescape")
    names = dict.fromkeys(name for name in listed.split("\0") if name)
    return [name for name in names if (repo / name).is_file() or (repo / name).is_symlink()]


def copy_tree(files: Sequence[str], source: Path, target: Path) -> None:
    for name in files:
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / name, destination, follow_symlinks=False)


def rotted(root: Path, mutants: Sequence[Mutant]) -> list[str]:
    """What is wrong with each of ``mutants`` whose snippet is not exactly once in its file
    under ``root`` (or that changes nothing): one message naming the mutant each."""
    problems = []
    for mutant in mutants:
        try:
            mutated(root, mutant)
        except MutantRotted as problem:
            problems.append(str(problem))
    return problems


def report_rotted(problems: Sequence[str]) -> None:
    for problem in problems:
        print(f"MUTANT ROTTED: {problem}", file=sys.stderr)
    print(
        f"{len(problems)} mutant(s) point at code that is not there (exactly once): re-point "
        "each (its file and its old/new snippets) in bench/mutations.py",
        file=sys.stderr,
    )


def mutated(root: Path, mutant: Mutant) -> str:
    """The text of ``mutant``'s file in the copy at ``root`` with the mutant applied;
    :class:`MutantRotted` unless its snippet is there exactly once."""
    path = root / mutant.file
    if not path.is_file():
        raise MutantRotted(f"{mutant.name}: {mutant.file} does not exist")
    text = path.read_text(encoding="utf-8")
    count = text.count(mutant.old)
    if count != 1:
        raise MutantRotted(
            f"{mutant.name}: the snippet occurs {count} times in {mutant.file}, not once:\n"
            f"{mutant.old}"
        )
    if mutant.old == mutant.new:
        raise MutantRotted(f"{mutant.name}: the mutation changes nothing")
    return text.replace(mutant.old, mutant.new)


def mutate(root: Path, mutant: Mutant) -> None:
    """Apply ``mutant`` to the copy at ``root``."""
    (root / mutant.file).write_text(mutated(root, mutant), encoding="utf-8")


def child_environment(root: Path) -> dict[str, str]:
    env = dict(os.environ)  # TEST_DATABASE_URL only when the caller set it
    env.pop("PYTEST_ADDOPTS", None)
    env["PYTHONPATH"] = str(root)
    return env


def end_group(pid: int) -> None:
    """Kill the process group this script started for ``pid`` (gone already: nothing)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def run(command: Sequence[str], root: Path, timeout: float) -> PytestRun:
    """Run ``command`` in ``root`` (its own process group, killed on timeout)."""
    started, used = time.monotonic(), children_cpu()
    process = subprocess.Popen(
        list(command),
        cwd=root,
        env=child_environment(root),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    code: int | None = None
    try:
        output, _ = process.communicate(timeout=timeout)
        code = process.returncode
    except subprocess.TimeoutExpired:
        end_group(process.pid)
        try:  # a process that left the group may still hold the pipe: do not wait for it
            output, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            output = b""
    except BaseException:  # Ctrl-C: the group is in a session of its own, end it too
        end_group(process.pid)
        raise
    text = output.decode("utf-8", "replace")
    return PytestRun(code, time.monotonic() - started, text, children_cpu() - used)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pytest(root: Path, arguments: Sequence[str], timeout: float, *, stop: bool) -> PytestRun:
    flags = ("-x",) if stop else ()
    return run([str(PYTHON), *PYTEST, *flags, *arguments], root, timeout)


def tail(output: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(output.rstrip().splitlines()[-lines:])


def selections(mutants: Sequence[Mutant]) -> list[tuple[str, ...]]:
    """The tests of ``mutants`` as few pytest invocations: every plain node id or file in one;
    each selection with options (``-k``) in one of its own."""
    plain: dict[str, None] = {}
    own: dict[tuple[str, ...], None] = {}
    for mutant in mutants:
        if any(argument.startswith("-") for argument in mutant.tests):
            own[mutant.tests] = None
        else:
            plain.update(dict.fromkeys(mutant.tests))
    return ([tuple(plain)] if plain else []) + list(own)


def imports_from_copy(root: Path, mutants: Sequence[Mutant], timeout: float) -> str | None:
    """None when the copy's packages and every mutated module are imported from the copy;
    else what went wrong."""
    modules = list(PACKAGES)
    for mutant in mutants:
        module = mutant.file.removesuffix(".py").replace("/", ".")
        modules.append(module.removesuffix(".__init__"))
    probe = (
        "import importlib\n"
        f"for name in {sorted(set(modules))!r}:\n"
        "    print(name, importlib.import_module(name).__file__)\n"
    )
    outcome = run([str(PYTHON), "-c", probe], root, timeout)
    if outcome.returncode is None:
        return f"the import probe took more than {timeout:g} s"
    if outcome.returncode != 0:
        return f"the import probe failed:\n{tail(outcome.output)}"
    wrong = []
    for line in outcome.output.splitlines():
        name, _, where = line.partition(" ")
        if not Path(where).resolve().is_relative_to(root.resolve()):
            wrong.append(f"{name} from {where}")
    if wrong:
        return "modules imported from outside the copy: " + ", ".join(wrong)
    core = next(line for line in outcome.output.splitlines() if line.startswith("core "))
    print(f"core resolves inside the copy: {core.partition(' ')[2]}")
    return None


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def shown_tests(arguments: Sequence[str]) -> str:
    """A mutant's pytest arguments for the table: one per line, an option with its value."""
    shown: list[str] = []
    for argument in arguments:
        if shown and shown[-1] in ("-k", "-m"):
            shown[-1] = f"{shown[-1]} {argument}"
        else:
            shown.append(argument.removeprefix("tests/"))
    return "<br>".join(shown)


def first_failure(output: str) -> str:
    """The first failed test of a pytest run's short summary ('' when there is none)."""
    _, _, summary = output.partition("short test summary info")
    for line in summary.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" ", 1)[1].split(" - ", 1)[0]
    return ""


def result_of(outcome: PytestRun) -> str:
    if outcome.returncode is None:
        return "timeout"
    if outcome.returncode == 1:
        return "killed"
    if outcome.returncode == 0:
        return "survived"
    return f"error (pytest exit {outcome.returncode})"


def parse_arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Mutation check of the test suite's central guarantees."
    )
    names = [m.name for m in MUTANTS]
    parser.add_argument(
        "--only", action="append", choices=names, metavar="NAME", help=f"one of {names}"
    )
    parser.add_argument(
        "--ci", action="store_true", help="only the mutants of CI's subset (fast tests)"
    )
    parser.add_argument(
        "--check-snippets",
        action="store_true",
        help="only check that every chosen mutant's snippet is in its file exactly once "
        "(no copy, no test run: a second or two)",
    )
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per pytest run")
    parser.add_argument(
        "--jobs", type=int, default=1, metavar="N", help="mutants tested at once (default 1)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the throwaway copies")
    return parser.parse_args(argv)


def chosen_mutants(arguments: argparse.Namespace) -> list[Mutant]:
    return [
        m
        for m in MUTANTS
        if (not arguments.only or m.name in arguments.only) and (m.ci or not arguments.ci)
    ]


def list_mutants(mutants: Sequence[Mutant]) -> None:
    for mutant in mutants:
        where = "CI" if mutant.ci else "not in CI"
        print(f"{mutant.name}  ({mutant.file}; {where})")
        print(f"    breaks: {mutant.breaks}")
        for test in mutant.tests:
            print(f"    {test}")


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_arguments(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):  # progress lines in order with stderr's
        sys.stdout.reconfigure(line_buffering=True)
    chosen = chosen_mutants(arguments)
    if arguments.list:
        list_mutants(chosen)
        return 0
    if arguments.check_snippets:
        problems = rotted(REPO, chosen)
        if problems:
            report_rotted(problems)
            return 2
        print(f"every snippet of {len(chosen)} mutants is in its file exactly once")
        return 0
    if not PYTHON.exists():
        print(f"no {PYTHON}: create the virtual environment first", file=sys.stderr)
        return 2
    began = time.monotonic()
    workspace = Path(tempfile.mkdtemp(prefix="fathom-mutations-"))
    try:
        return check(chosen, workspace, arguments.timeout, began, arguments.jobs)
    finally:
        if arguments.keep:
            print(f"copies kept in {workspace}")
        else:
            shutil.rmtree(workspace, ignore_errors=True)


def compile_copy(root: Path, timeout: float) -> None:
    """Byte-compile the copy once, so each mutant's copy of it (``copytree`` keeps the
    files' times, which the compiled files are checked against) imports without compiling
    every module again; only the mutated file is compiled anew. Best effort."""
    run([str(PYTHON), "-m", "compileall", "-q", "-j", "0", "."], root, timeout)


@dataclass(frozen=True)
class Row:
    """What one mutant came to."""

    mutant: Mutant
    result: str  # killed, survived, timeout, error (...)
    seconds: float
    cpu: float | None  # None: not measured alone (``--jobs`` above 1)


def in_threads(work: Callable[[Mutant], Row], mutants: Sequence[Mutant], jobs: int) -> list[Row]:
    """``work`` of each mutant, ``jobs`` at once (threads: each waits on its own pytest
    process), in the mutants' order. (Not concurrent.futures: it imports ``queue``, which
    this folder's bench/queue.py shadows when the script runs as a file.)"""
    results: dict[int, Row] = {}
    left = list(enumerate(mutants))
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not left:
                    return
                index, mutant = left.pop(0)
            try:
                results[index] = work(mutant)
            except Exception as exc:  # (a copy that failed, say): that mutant is not killed
                print(f"{mutant.name}: error ({exc!r})", flush=True)
                results[index] = Row(mutant, f"error ({type(exc).__name__})", 0.0, None)

    threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [results[index] for index in sorted(results)]


def check(
    mutants: Sequence[Mutant], workspace: Path, timeout: float, began: float, jobs: int = 1
) -> int:
    files = repository_files(REPO)
    base = workspace / "base"
    copy_tree(files, REPO, base)  # one snapshot: every run below sees the same code
    print(f"copied {len(files)} files of {REPO} to {base}")
    problems = rotted(base, mutants)  # every snippet first: the check fails before any run
    if problems:
        report_rotted(problems)
        return 2
    compile_copy(base, timeout)

    sane = workspace / "sanity"
    shutil.copytree(base, sane, symlinks=True)
    problem = imports_from_copy(sane, mutants, timeout)
    if problem is not None:
        print(f"SANITY CHECK FAILED: {problem}", file=sys.stderr)
        return 1
    for selection in selections(mutants):
        outcome = pytest(sane, selection, timeout, stop=False)
        summary = tail(outcome.output, 1)
        if outcome.returncode is None:
            summary = f"timed out after {timeout:g} s"
        spent = f"{outcome.seconds:.1f} s, {outcome.cpu:.1f} s of CPU"
        print(f"sanity run without mutation ({spent}): {summary}")
        if outcome.returncode != 0:
            print(f"SANITY CHECK FAILED:\n{tail(outcome.output)}", file=sys.stderr)
            return 1

    def attempt(mutant: Mutant) -> Row:
        root = workspace / mutant.name
        shutil.copytree(base, root, symlinks=True)
        mutate(root, mutant)
        outcome = pytest(root, mutant.tests, timeout, stop=True)
        result = result_of(outcome)
        by = f" by {first_failure(outcome.output)}" if result == "killed" else ""
        cpu = outcome.cpu if jobs <= 1 else None
        spent = "" if cpu is None else f", {cpu:.1f} s of CPU"
        shown = f"{mutant.name}: {result}{by} in {outcome.seconds:.1f} s{spent}"
        if result != "killed":
            shown += f"\n--- {mutant.name}: pytest output (tail)\n{tail(outcome.output)}\n---"
        print(shown, flush=True)
        return Row(mutant, result, outcome.seconds, cpu)

    rows = in_threads(attempt, mutants, jobs)

    print()
    print("| guarantee | file | tests | CI | result | seconds | CPU seconds |")
    print("|---|---|---|---|---|---:|---:|")
    for row in rows:
        mutant = row.mutant
        tests = shown_tests(mutant.tests)
        cpu = "" if row.cpu is None else f"{row.cpu:.1f}"
        print(
            f"| {cell(mutant.name)} | {cell(mutant.file)} | {cell(tests)} "
            f"| {'yes' if mutant.ci else 'no'} | {row.result} | {row.seconds:.1f} | {cpu} |"
        )
    killed = sum(row.result == "killed" for row in rows)
    print()
    print(
        f"{killed}/{len(rows)} mutants killed in {time.monotonic() - began:.0f} s in all "
        f"({children_cpu():.0f} s of CPU)"
    )
    alive = [f"{row.mutant.name} ({row.result})" for row in rows if row.result != "killed"]
    if alive:
        print(f"NOT KILLED: {', '.join(alive)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
