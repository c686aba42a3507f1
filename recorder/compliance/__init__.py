"""Compliance: what an auditor receives, and what the store may forget.

Export bundles (`export`) and their offline check (`verify_export`, `bundle_proof`), reading a
bundle back (`bundle_read`), and retention with legal holds, run by hand or on a timer
(`retention`, `retention_schedule`).
"""
