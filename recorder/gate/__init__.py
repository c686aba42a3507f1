"""The gate: what a tap lets through, and the decisions it records.

Policy rules and their file (`policy_rules`), the gate itself (`policy`), live reload
(`policy_reload`), tool pins and drift (`pinning`, `tooldefs`, `tool_watch`), permission decisions
as log records (`decisions`) and the host hooks that report the host's own decisions (`hooks`).
"""
