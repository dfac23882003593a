"""A run from request to report: the request side (``requests``), the executor that claims,
executes and finishes runs (``executor``, with ``executing`` and ``steps``), the writer and
the report (``writer``, ``report``, ``prompts``, ``whats_new``), the run's lease (``lease``),
and what a run came to (``outcome``, ``cost``); ``service`` builds the two sides once over one
database. The strategies that do the searching are ``core.engine``'s."""
