"""Replay: re-drive a recorded session against a server and explain every divergence."""
