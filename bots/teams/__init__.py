"""Microsoft Teams: Bot Framework activities in, Bot Connector calls out."""
