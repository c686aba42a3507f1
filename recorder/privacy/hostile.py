"""Hostile inputs for the built-in redaction rules: what a server would send to make redaction
slow, and plain text to compare it with.

Why it lives in the package: the linear-time property test (tests/) and the benchmark (bench/)
attack the rules with the same inputs, and bench/ imports nothing from tests/. One list of
trigger words per rule here means a rule added without its hostile words fails both at once.
"""

from __future__ import annotations

import json
import random

# Per built-in rule, the words that make it look (its literals and the heads it starts from):
# tiled, or followed by a long run of one character, they make the rule start over and over
# without completing a match.
HOSTILE_PIECES: dict[str, tuple[str, ...]] = {
    "private_key_block": (
        "-----BEGIN RSA PRIVATE KEY-----",
        "-----END RSA PRIVATE KEY-----",
        "-----BEGIN ",
        "PRIVATE KEY-----",
    ),
    "jwt": ("eyJ", "eyJabcdefgh.", "eyJabcdefgh.eyJ", "eyJabcdefgh.eyJabcdefgh"),
    "url_password": ("://", "://a:", "://user:pw", "a:"),
    "url_query": ("?token=", "&sig=", "?X-Amz-Signature=", "&key", "?access_token"),
    "authorization_header": (
        "Authorization:",
        "authorization: ",
        "Authorization: Bearer ",
        "Proxy-Authorization=",
    ),
    "cookie_header": ("Cookie: ", "cookie=", "Set-Cookie:", "Cookie: a"),
    "bearer": ("Bearer ", "token ", "bearer", "Bearer abcdefg"),
    "basic_auth": ("Basic ", "basic", "Basic abcdefg"),
    "openai_anthropic_key": ("sk-", "sk-abcdefghijklmno", "sk-ant-"),
    "stripe_key": ("sk_live_", "rk_test_", "whsec_"),
    "github_token": ("ghp_", "github_pat_", "gho_"),
    "gitlab_token": ("glpat-", "gl"),
    "aws_access_key": ("AKIA", "ASIA", "AKIA0123456789ABCDE"),
    "slack_token": ("xoxb-", "xapp-1-", "xox"),
    "slack_webhook": ("hooks.slack.com/services/T", "hooks.slack.com/services/T1/B", "/B"),
    "google_api_key": ("AIza", "-AIza"),
    "google_oauth": ("ya29.", "GOCSPX-"),
    "azure_storage_key": ("AccountKey=", "accountkey"),
    "sendgrid_key": ("SG.", "SG.abcdefghijklmnop."),
    "npm_token": ("npm_",),
    "pypi_token": ("pypi-AgE",),
    "huggingface_token": ("hf_",),
    "telegram_bot_token": ("12345678:AA", ":AA"),
    "mailchimp_key": ("0123456789abcdef0123456789abcdef-us", "-us"),
    "digitalocean_token": ("dop_v1_", "_v1_"),
    "shopify_token": ("shpat_", "shp"),
    "embedded_json": ('"token"', '"api_key": ', '{"password":', '\\"secret\\": ', "'apiKey':"),
    "name_value": ('{"name": "password", "value": ', '"name": "DB_PASSWORD"', '"value":'),
    "assignment": ("password=", "api_key:", "DB_PASSWORD", "token", "x-api-key: "),
    "cli_flag": (" --password ", "--token", " -api-key"),
    "quoted_after_name": ("PASSWORD '", 'client_secret "', "password 'a"),
    "markdown_table": ("| user | password |\n|---|---|\n", "| a | b |\n", "|---|\n", "| token |\n"),
    "sql_password": ("IDENTIFIED BY '", "identified with x by '", "IDENTIFIED BY"),
    "netrc_password": ("\npassword ", "\nmachine h login u password ", "\n  passwd "),
    "password_phrase": ("password is", "passwd was", "password is:", "passphrase is '"),
    "email": ("a.", "a@", "@a.", "a@a"),
}
# One character of each class the patterns repeat (and a few that end runs).
RUN_CHARS = " \t\n.-_:=/@\"'\\aA0+%~;,&{[?#*$<é"
QUICK_RUN_CHARS = " \n.-:=@\"'\\aA0"


def tile(unit: str, size: int) -> str:
    """`unit` repeated to exactly `size` characters."""
    return (unit * (size // len(unit) + 1))[:size]


def candidates(pieces: tuple[str, ...], chars: str, size: int) -> list[str]:
    """Every hostile text of `size` characters from a rule's pieces: each tiled, each pair
    tiled, each followed by a run of one of `chars`."""
    texts = [tile(p, size) for p in pieces]
    texts += [tile(a + b, size) for a in pieces for b in (*pieces, *chars)]
    texts += [p + c * (size - len(p)) for p in pieces for c in chars]
    return texts


def plain_text(size: int) -> str:
    """Prose of a tool result with a few secrets in it, so that every rule runs over it all."""
    rng = random.Random(7)
    words = ["the", "server", "returned", "a", "result", "with", "status", "ok", "and", "the"]
    words += ["tool", "listed", "files", "in"]
    sprinkle = [
        "alice.auditor@example.org",
        "https://user:hunter2pw@db.example.com/x",
        "password=tiger-lily-42",
        "Bearer abc123def456ghi789",
        "sk-proj-Abc123Def456Ghi789Jkl012",
        '{"api_key": "k-123456789"}',
        "https://x.example/cb?code=abc123&state=s",
    ]
    parts: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(sprinkle) if rng.random() < 0.002 else rng.choice(words)
        parts.append(word)
        length += len(word) + 1
    return " ".join(parts)[:size]


def frame(text: str) -> bytes:
    """`text` as a tool result's frame."""
    return json.dumps({"jsonrpc": "2.0", "id": 1, "result": {"text": text}}).encode()
