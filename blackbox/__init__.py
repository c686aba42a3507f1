"""The application shell of mcp-blackbox: the `blackbox` command and its configuration.

The only package that imports click and the only one that reads the environment.
"""
