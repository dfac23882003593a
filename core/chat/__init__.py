"""What a chat request says and what the chat layer may see: the command grammar
(:mod:`core.chat.grammar`, :mod:`core.chat.commands`), a digest's schedule (cron in a
timezone, :mod:`core.chat.schedule`) and the stores the chat layer and the platforms use
(:mod:`core.chat.stores`). It sits above the research it starts and below the operations
that fire schedules; ``bots/`` builds on it."""
