"""Slack adapter: slash commands and mentions in, progress edits and Markdown reports out."""
