"""Taps: where traffic is recorded on its way between host and server."""
