"""The log: what a record is and how it is written down.

The raw bytes of a frame are the record; everything else here is derived from them or built over
them: the frozen record types (`model`), the typed documents of every other kind (`events`,
`event_base`), the JSON-RPC classifier that never raises (`jsonrpc`), request/response pairing
(`pairing`), the per-session hash chain (`chain`), the RFC 9162 Merkle hashes over the log
(`merkle`), the Arrow columns of the record types (`columns`) and the generated format page
(`format_page`). Pure: no database, no I/O beyond the page generator.
"""
