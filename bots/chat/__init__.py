"""The chat layer every platform shares: commands in, progress and reports out.

An adapter (``bots/slack``, ``bots/feishu``, ...) only translates: platform deliveries into
neutral messages, and the layer's output into platform calls.
"""
