"""Hosts: reading and rewriting the MCP hosts' own config files for `blackbox attach`."""
