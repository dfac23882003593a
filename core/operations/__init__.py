"""Where and when runs execute: the research job that claims a run and delivers its outcome
(``job``), the job runners (``runners``: in-process; ``queue``: procrastinate), a run's
lease, elections and the connection duty, and scheduled digests (``digests``, ``schedule``,
``scheduler``, ``whats_new``)."""
