"""``python -m bots.cli``: the ``fathom`` command."""

from bots.cli import main

main()
