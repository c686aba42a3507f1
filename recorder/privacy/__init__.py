"""Privacy: secrets replaced before a record leaves the store, by every way out.

Redaction rules (`redact`) and the keyed fingerprints that stand in for a secret (`fingerprint`).
"""
