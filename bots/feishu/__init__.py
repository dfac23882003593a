"""Feishu/Lark: its settings, events in, delivery out and its API client."""
