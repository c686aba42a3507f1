"""The `blackbox` command: one registry of subcommands (`main`), their options grammar
(`options`) and output rendering (`output`). The only package that imports click."""
