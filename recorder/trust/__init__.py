"""Trust: proving the log to someone who does not trust the database.

Signed checkpoints in the C2SP formats (`checkpoint`), the signing key on disk (`keys`), signing
what the store committed (`signing`), and checking the log against checkpoints or proving a record
is in it (`logproof`). The incremental tree these sign lives in the store (`store.tree`), because
retention changes it in the same transaction as the records; its hashes are `log.merkle`.
"""
