"""``core.values`` is the leaf every layer imports (the chat layer and each platform for
``ThreadKey``): importing it must load neither SQLAlchemy nor any of storage's modules."""

from __future__ import annotations

import json
import subprocess
import sys


def test_importing_the_values_loads_no_storage_and_no_sqlalchemy() -> None:
    probe = (
        "import json, sys, core.values; "
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('sqlalchemy', 'storage', 'bots', 'alembic') "
        "or (m.startswith('core.') and m != 'core.values'))))"
    )
    loaded = json.loads(
        subprocess.run(
            [sys.executable, "-c", probe], check=True, capture_output=True, text=True
        ).stdout
    )
    assert loaded == []
