"""mcp-blackbox: a flight recorder for the Model Context Protocol.

The one import name the distribution installs. The repository's folders recorder/, replay/,
analytics/ and migrations/ are installed as its subpackages; blackbox/ itself holds the shell
around them: the `blackbox` command (`cli`, the only package that imports click), the hosts'
config files (`hosts`), the web UI (`ui`), the configuration and the pytest plugin.
docs/architecture.md has the map.
"""
