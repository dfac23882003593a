"""The graph strategy (after MindSearch): sub-questions searched in parallel.

``strategy`` runs it (and registers it: ``GRAPH_STRATEGY``), ``plan`` checks what its planner
proposes, ``state`` is what it keeps with the thread (``strategyState.graph``).
"""
