"""Throwaway PostgreSQL databases for tests and benchmarks (never touches existing data)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from sqlalchemy.engine import make_url


@contextmanager
def throwaway_database(server_url: str, prefix: str = "fathom_t") -> Iterator[str]:
    """Create an empty database on the server of ``server_url``; drop it afterwards.

    Yields its SQLAlchemy URL (psycopg 3 driver).
    """
    server = make_url(server_url)
    conninfo = server.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(drivername="postgresql+psycopg", database=name).render_as_string(
            hide_password=False
        )
    finally:
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
