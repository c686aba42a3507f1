"""The read model: how sessions, their records and their timelines are read back.

The sessions listing with its filters and handles (`listing`), paged reads for live views
(`browse`), following the log as it grows (`follow`), a session's timeline (`timeline`) and the
short text of a record (`excerpt`).
"""
