"""Run rows for tests that work on them through the real Store: create, claim, finish, age."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import update

from core.values import ThreadKey
from storage import Admission, Claim, Database, RunRecord, Store
from storage.tables import ResearchRun

KEY = "slack:T0001:C0001:1700000000.000100"
OWNER = "test-runner"


async def new_run(store: Store, **overrides: Any) -> tuple[RunRecord, bool]:
    """``RunStore.create_run`` with defaults; ``thread_key`` names the thread (a string),
    ``user_limit`` and ``quota`` its :class:`~storage.Admission`."""
    args: dict[str, Any] = {
        "thread": ThreadKey.parse(overrides.pop("thread_key", KEY)),
        "topic": "solid-state batteries",
        "depth": 3,
        "strategy": "iterative",
        "requested_by": "U1",
    }
    limits = {k: overrides.pop(k) for k in ("user_limit", "quota") if k in overrides}
    if limits:
        args["admission"] = Admission(**limits)
    args.update(overrides)
    return await store.runs.create_run(**args)


async def claim(
    store: Store,
    run_id: str,
    owner: str = OWNER,
    *,
    stale_after: float = 60,
    max_attempts: int = 3,
) -> Claim:
    """Claim the run, which must succeed."""
    result = await store.claims.claim_run(
        run_id, owner, stale_after=stale_after, max_attempts=max_attempts
    )
    assert result.claim is not None, result
    return result.claim


async def finish(
    store: Store, held: Claim, *, status: str = "succeeded", error: str | None = None
) -> RunRecord:
    report = "# r" if status == "succeeded" else None
    return await store.claims.finish_run(
        held, status=status, report_markdown=report, sources=[], error=error, usage={}, notes=[]
    )


async def age_heartbeat(database: Database, run_id: str, seconds: float = 3600) -> None:
    """What a runner that died ``seconds`` ago leaves behind: an old heartbeat."""
    async with database.sessionmaker.begin() as session:
        then = datetime.now(UTC) - timedelta(seconds=seconds)
        await session.execute(
            update(ResearchRun).where(ResearchRun.id == run_id).values(heartbeat_at=then)
        )
