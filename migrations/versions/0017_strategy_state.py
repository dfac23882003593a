"""Each strategy's own state in one JSON object of the thread: ``thread_variables.strategy_state``.

A strategy keeps what it needs beyond the shared variables under its own name (the graph
strategy its sub-questions, ``{"graph": {"nodes": [...]}}``); storage neither reads nor
names what is inside. The graph's nodes, until now the ``graph`` column (0008), are copied
there.

Expand only, so release N-1 runs on this schema: ``graph`` stays, no longer read or written by
this release (the release after next drops it). While both releases run, a graph research
handed from one to the other sees the sub-questions the other planned since the migration as
not planned, and may plan its remaining ones again; topics already searched are not searched
again either way. Downgrading copies the nodes back into ``graph``.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(JSONB(), "postgresql")
#: The graph strategy's name: where its state is kept.
GRAPH = "graph"
BATCH = 500

_variables = sa.table(
    "thread_variables",
    sa.column("thread_id", sa.Integer),
    sa.column("graph", JSON),
    sa.column("strategy_state", JSON),
)


def upgrade() -> None:
    with op.batch_alter_table("thread_variables") as batch:
        batch.add_column(sa.Column("strategy_state", JSON, nullable=True))
    _copy(
        _variables.c.graph,
        lambda nodes: {GRAPH: {"nodes": nodes}} if nodes else None,
    )


def downgrade() -> None:
    _copy(_variables.c.strategy_state, _nodes)
    with op.batch_alter_table("thread_variables") as batch:
        batch.drop_column("strategy_state")


def _nodes(state: Any) -> list[Any] | None:
    graph = state.get(GRAPH) if isinstance(state, dict) else None
    nodes = graph.get("nodes") if isinstance(graph, dict) else None
    return list(nodes) if nodes else None


def _copy(source: sa.ColumnElement[Any], convert: Any) -> None:
    """Write ``convert(source)`` into the other column of every thread that has ``source``,
    in batches of thread ids."""
    target = "strategy_state" if source.name == "graph" else "graph"
    conn = op.get_bind()
    last = 0
    while True:
        rows = conn.execute(
            sa.select(_variables.c.thread_id, source)
            .where(_variables.c.thread_id > last, source.is_not(None))
            .order_by(_variables.c.thread_id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        for thread_id, value in rows:
            conn.execute(
                _variables.update()
                .where(_variables.c.thread_id == thread_id)
                .values({target: convert(value)})
            )
        last = rows[-1][0]
