"""The research strategies and what they share: the interface (``strategy.py``), the registry
(``registry.py``), each strategy's module or package, and the steps, state, budgets, progress
and sources they have in common."""
