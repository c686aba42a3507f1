"""The write side and the system of record of mcp-blackbox.

Everything else (replay, analytics, the CLI) reads what this package wrote; nothing here imports
them.
"""

__version__ = "0.1.0"
