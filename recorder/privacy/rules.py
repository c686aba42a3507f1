"""The built-in redaction rules: secret key names, and the shapes of secrets found in free text.

Why these: they are what leaks through an MCP session in practice. Tool arguments and results
carry API keys of the well-known services (their prefixes make them findable with no false
positives: `sk-`, `sk_live_`, `ghp_`, `xoxb-`, `AKIA`, `AIza`, ...), JWTs, PEM private keys,
bearer and basic credentials, URLs with a password or a credential in their query, and e-mail
addresses. Secrets introduced by a name (`"api_key": "..."` inside a tool's text, `PASSWORD=...`,
`Authorization: ...`) are found by `embedded`, which judges the name with the key rules here.

Every pattern is an RE2 pattern without capturing groups (see `engine.Rule` for why); the part
of a match that is the secret is read by a picker from the match's bytes. A picker looks at no
more than its match and a bounded window after it, so a text costs one automaton pass per rule.

Formats were compared with detect-secrets' plugins (Yelp/detect-secrets), which is not a
dependency: it runs Python's backtracking `re` (some of its patterns are super-linear on a crafted
line), scans source files line by line, and its entropy detectors flag every hash and UUID.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from blackbox.recorder.privacy.engine import (
    MARKER,
    Context,
    Hit,
    Match,
    Picker,
    Rule,
    compile_builtin,
)

# Key names whose values are secrets wherever they appear. Names are compared after folding
# camelCase to snake_case, lower-casing and turning '-' into '_' (so `X-Api-Key`, `apiKey` and
# `api_key` all match). A name matches when it equals one of these or ends with `_<one of these>`.
BUILTIN_KEYS = (
    "pass",
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "secret",
    "client_secret",
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "auth_token",
    "api_key",
    "apikey",
    "x_api_key",
    "access_key",
    "secret_key",
    "account_key",
    "signing_key",
    "encryption_key",
    "master_key",
    "authorization",
    "proxy_authorization",
    "cookie",
    "set_cookie",
    "private_key",
    "credentials",
    "session_token",
    "auth",  # a string only (`"auth": "dXNlcjpwdw=="` in a Docker or npm config), see `redact`
)
# Key names whose value is a secret only when it is a string: as an object, a configuration.
STRING_ONLY_KEYS = frozenset({"auth"})
# Names that would match a suffix above but are protocol plumbing, not secrets.
NOT_SECRET_KEYS = frozenset({"progress_token", "next_token", "max_tokens", "tokens"})
# Besides, any name with a word containing "token" (`tokenValue`, `x_token_id`, `csrftoken`) is a
# secret, except token counts and tokenizers (`input_tokens`, `token_count`, `tokenizer`) and
# what describes a token without being one (OAuth's `token_type`, `token_endpoint`).
_TOKEN_ABOUT = (
    *("_type", "_endpoint", "_url", "_uri", "_expires", "_expiry", "_expiration", "_ttl"),
    "_lifetime",
)
# `pwd` and `oldpwd` are also the shell's working directories (`PWD=/home/me`): a path is none.
PATH_KEYS = frozenset({"pwd", "oldpwd"})

_CAMEL = re.compile(r"([a-z0-9])(?=[A-Z])")  # fixed width: linear in the name


@functools.lru_cache(maxsize=4096)
def fold_key(name: str) -> str:
    """`X-Api-Key`, `apiKey`, `API key` -> `x_api_key`, `api_key`, `api_key`."""
    return _CAMEL.sub(r"\1_", name).lower().replace("-", "_").replace(" ", "_").replace(".", "_")


def has_token_word(folded: str) -> bool:
    """Whether a folded name holds a word with "token" that is not a count or a tokenizer:
    `tokenValue`, `x_token_id`, `csrftoken`, but not `tokens`, `input_tokens`, `token_count`,
    `token_limit`, `tokenizer`."""
    at = folded.find("token")
    while at >= 0:
        rest = folded[at + 5 :]
        if not _token_exception(rest):
            return True
        at = folded.find("token", at + 5)
    return False


def _token_exception(rest: str) -> bool:
    if rest.startswith(("is", "iz", "s_", *_TOKEN_ABOUT)):
        return True
    for word in ("s", "_count", "_limit"):
        if rest.startswith(word):
            after = rest[len(word) : len(word) + 1]
            if not (after.isalnum() or after == "_"):
                return True  # the word ends there
    return False


def key_variants(names: set[str]) -> list[str]:
    """The spellings a folded key name can take in text (snake, glued, kebab, spaced, dotted),
    longest first: every text naming a secret key holds one of them, lower-cased."""
    variants = set()
    for name in names:
        variants.update({name, name.replace("_", "")})
        variants.update(name.replace("_", sep) for sep in "- .")
    return sorted(variants, key=len, reverse=True)


# Query parameters that carry credentials: these names (compared lower-case, `-` as `_`), any
# name containing one of the parts, and any ending in one of the suffixes. `X-Amz-Signature`,
# `X-Amz-Credential`, `X-Amz-Security-Token` (S3), `X-Goog-Signature` (GCS) and `sig` (Azure
# SAS) are presigned URLs' signatures: whoever holds the URL holds the access.
SECRET_PARAMS = frozenset(
    {
        *("access_token", "api_key", "apikey", "auth", "authorization", "client_secret"),
        *("code", "code_verifier", "id_token", "jwt", "key", "pass", "passwd", "password"),
        "access_key",
        *("pwd", "refresh_token", "secret", "sessionid", "session_id", "sid", "sig"),
        *("signature", "token"),
    }
)
SECRET_PARAM_PARTS = (
    *("token", "secret", "passw", "apikey", "api_key", "signature", "credential", "session"),
    "verifier",
)
SECRET_PARAM_SUFFIXES = ("access_key", "private_key", "signing_key", "_sig")


def is_secret_param(name: str) -> bool:
    """Whether a query parameter named `name` carries a credential."""
    folded = name.lower().replace("-", "_")
    return (
        folded in SECRET_PARAMS
        or folded.endswith(SECRET_PARAM_SUFFIXES)
        or any(part in folded for part in SECRET_PARAM_PARTS)
    )


# Words that follow "password:" or "token=" in prose and documentation, never as the secret:
# "password: required", "token: none", "the password is incorrect", "secret: see below".
STOP_WORDS = frozenset(
    {
        *("a", "an", "the", "is", "was", "are", "be", "been", "being", "not", "no", "none"),
        *("null", "nil", "true", "false", "yes", "ok", "n/a", "na", "tbd", "todo", "unset"),
        *("empty", "blank", "required", "optional", "mandatory", "needed", "missing"),
        *("incorrect", "correct", "wrong", "invalid", "valid", "expired", "revoked", "unknown"),
        *("set", "changed", "reset", "updated", "saved", "stored", "hashed", "encrypted"),
        *("hidden", "masked", "redacted", "omitted", "removed", "shown", "sent", "provided"),
        *("configured", "generated", "entered", "accepted", "rejected", "locked", "disabled"),
        *("enabled", "protected", "secure", "insecure", "weak", "strong", "too", "very"),
        *("same", "different", "used", "unused", "visible", "available", "supported"),
        *("string", "str", "int", "integer", "number", "boolean", "bool", "object", "array"),
        *("see", "use", "your", "my", "our", "their", "his", "her", "its", "this", "that"),
        *("here", "there", "below", "above", "default", "example", "placeholder", "value"),
        *("also", "only", "still", "never", "always", "now", "then", "and", "or", "of"),
        *("for", "to", "in", "on", "at", "by", "with", "from", "as", "if", "when", "must"),
        *("should", "will", "can", "may", "has", "have", "had", "does", "did", "do"),
        *("minimum", "maximum", "length", "characters", "chars", "policy", "field", "prompt"),
        *("bearer", "basic", "token", "digest", "negotiate", "ntlm", "password", "secret"),
        *("key", "keys", "tokens", "passwords", "secrets", "credentials", "auth", "cookie"),
    }
)


_PROSE_TAIL = ".,:;!?)]}"  # punctuation a sentence puts after a word


def is_placeholder(value: bytes) -> bool:
    """Whether a value stands for one without being one: empty, `${TOKEN}`, `<your-key>`,
    `{{secret}}`, `%s`, a mask (`***`, `xxx`, `•••`, `...`), or a marker already."""
    if not value or value.startswith(MARKER):
        return True
    if value[:1] in (b"$", b"<", b"%", b"*", b"\xe2") or value[:2] == b"{{":
        return True  # "…" and "•" start with 0xe2 in UTF-8
    return value[:3] in (b"...", b"xxx", b"XXX")


def is_prose(value: bytes) -> bool:
    """Whether a bare value after a secret's name is an English word of the kind above (or a
    placeholder): "password: required", "token: see below"."""
    if is_placeholder(value):
        return True
    word = value.lower().rstrip(_PROSE_TAIL.encode())
    return len(word) <= 40 and word.decode("latin-1") in STOP_WORDS


# The stop words a rule's pattern itself refuses after a secret's name: the names and schemes
# (what a text tiled with a rule's own trigger words holds after each name: `token = token =`,
# `password is: password is:`) and the commonest prose. The picker refuses the other stop words,
# one candidate at a time: with all of them the pattern is three times larger, and the automaton
# RE2 runs backwards over each match to find its start outgrows its memory.
PATTERN_STOP_WORDS = frozenset(
    {
        *("bearer", "basic", "token", "tokens", "digest", "negotiate", "ntlm", "auth"),
        *("password", "passwords", "secret", "secrets", "key", "keys", "credentials", "cookie"),
        *("is", "was", "are", "not", "none", "null", "required", "optional", "the", "a", "an"),
    }
)
assert PATTERN_STOP_WORDS <= STOP_WORDS


def _class_chars(chars: Iterable[str]) -> str:
    """Characters as the body of a character class."""
    return "".join("\\" + c if c in "\\]-^[" else c for c in sorted(set(chars)))


def not_prose_pattern(
    outside: str, *, first_not: str = "", last_not: str = "", min_len: int = 1, end: bool = True
) -> str:
    """An RE2 pattern of a value: a run of the characters not in `outside` (a character class's
    body, such as `\\s"'`), `min_len` long or more, starting with none of `first_not`, ending
    with none of `last_not` (punctuation) and, once its trailing punctuation is stripped, none of
    PATTERN_STOP_WORDS; then, with `end`, the character that ends the run (or the text's end),
    else the pattern after it must end the run.

    Why in the pattern: a text tiled with `token = token = ...` has a candidate every few bytes,
    each refused as prose, and a refusal in the automaton costs nothing where one in Python costs
    a call per candidate. The run is read as a word, then punctuation; the word is the stop
    words' complement, written as two tries (words that leave the stop words' trie and run on,
    words that end inside it on no stop word), so the pattern grows with the words' letters."""
    tail = "".join(c for c in _PROSE_TAIL if c not in outside)
    assert set(last_not) <= set(tail), "a bad last character is trailing punctuation"
    run = f"[^{outside}]"

    def cls(excluded: str) -> str:
        return f"[^{outside}{_class_chars(excluded)}]"

    def some(chars: str, excluded: str) -> str:
        return _class_chars(c for c in chars if c not in excluded)

    def punctuation(least: int) -> str:
        """Trailing punctuation, `least` characters or more, the last not in `last_not`."""
        if least <= 0:
            return f"(?:[{_class_chars(tail)}]*[{some(tail, last_not)}])?"
        return f"[{_class_chars(tail)}]{{{least - 1},}}[{some(tail, last_not)}]"

    trie: dict[str, dict] = {}
    for stop_word in sorted(PATTERN_STOP_WORDS):
        node = trie
        for c in stop_word:
            node = node.setdefault(c, {})
        node[""] = {}  # a stop word ends here

    def longer(node: dict) -> str:
        """Below the root: leaving the trie, then at least one more character."""
        children = "".join(sorted(c for c in node if c))
        alternatives = [cls(children)] + [re.escape(c) + longer(node[c]) for c in children]
        return "(?:" + "|".join(alternatives) + ")"

    def ending(node: dict, depth: int) -> str:
        """Ending on a stop word's prefix, or on the one character that leaves the trie; a word
        shorter than `min_len` with punctuation making up the length."""
        children = "".join(sorted(c for c in node if c))
        alternatives = [re.escape(c) + ending(node[c], depth + 1) for c in children]
        leave = cls(children + tail + (first_not if depth == 0 else ""))
        alternatives.append(leave + punctuation(min_len - depth - 1))
        if depth > 0 and "" not in node:
            alternatives.append(punctuation(min_len - depth))
        return "(?:" + "|".join(alternatives) + ")"

    roots = "".join(sorted(c for c in trie if c))
    first = cls(roots + first_not)
    # Leaving at the root: at least two characters; two need punctuation to make three.
    short = f"{run}{{{max(1, min_len - 2)},}}" if min_len > 2 else f"{run}*"
    word = (
        f"(?:{first}{short}{cls(tail)}{punctuation(0)}"
        + (f"|{first}{cls(tail)}{punctuation(min_len - 2)}" if min_len > 2 else "")
        + "".join(
            f"|{re.escape(c)}{longer(trie[c])}{run}*{cls(tail)}{punctuation(0)}" for c in roots
        )
        + f"|{ending(trie, 0)})"
    )
    # A run of punctuation alone is no stop word (`is_placeholder` judges it).
    if min_len > 1:
        alone = f"[{some(tail, first_not)}]{punctuation(min_len - 1)}"
    else:
        alone = f"[{some(tail, first_not + last_not)}]|[{some(tail, first_not)}]{punctuation(1)}"
    stop = f"(?:[{outside}]|$)" if end else ""
    return f"(?i:(?:{word}|{alone}){stop})"


_CALL = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*[(\[]")
_DOTTED = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")


_SCHEMA_TYPES = frozenset({"string", "integer", "number", "boolean", "object", "array", "null"})


def is_schema(value: object) -> bool:
    """Whether a value under a secret's name is a JSON Schema describing it (a tool's
    `inputSchema` property named `password`): it describes a secret, it is not one."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    return (isinstance(kind, str) and kind in _SCHEMA_TYPES) or "$ref" in value


def is_code(value: bytes) -> bool:
    """Whether a bare value is code naming where a secret is, not the secret: a call or an
    index (`os.getenv("X")`, `get_token()`, `os.environ[`) or a dotted name
    (`settings.SECRET_KEY`, `self.token`). The patterns are bounded: 64 bytes at most."""
    if len(value) > 64:
        return False
    return _CALL.match(value) is not None or _DOTTED.fullmatch(value) is not None


def is_plain_word(value: bytes) -> bool:
    """A short run of letters, lower-case after the first: prose, not a credential."""
    return len(value) <= 32 and value.isalpha() and value[1:].islower()


# -- pickers -----------------------------------------------------------------------------------


def marker_hit(start: int, end: int, secret: bytes, ctx: Context) -> Hit:
    """Replace `[start, end)` by the marker of `secret`."""
    return start, end, ctx.marker(secret).encode()


def whole(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """The whole match is the secret."""
    start, end = m.span()
    return marker_hit(start, end, buf[start:end], ctx)


def with_digit(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """The whole match, when it holds a digit (a key, not a word like `sk-learn-tutorials`)."""
    start, end = m.span()
    if not any(c in b"0123456789" for c in buf[start + 3 : end]):
        return None
    return marker_hit(start, end, buf[start:end], ctx)


def _not_plain_word(min_len: int) -> str:
    """An RE2 pattern of a token's run (`[A-Za-z0-9._~+/=-]`), `min_len` long or more, that
    `is_plain_word` does not refuse once its trailing dots are stripped: it holds a digit or
    other punctuation, a dot before more, an upper-case letter after another letter, or more than
    32 letters, or it is one letter or none before dots. Refused in the automaton, a text tiled
    with `Bearer Authorization` costs no call per word."""
    char = "[A-Za-z0-9._~+/=-]"
    marks = [("[0-9_~+/=-]", 1), (r"\.[A-Za-z0-9_~+/=-]", 2), ("[A-Za-z][A-Z]", 2)]
    alternatives = []
    for mark, width in marks:
        for before in range(min_len):
            after = max(0, min_len - before - width)
            alternatives.append(f"{char}{{{before}}}{mark}{char}{{{after},}}")
        alternatives.append(f"{char}{{{min_len},}}{mark}{char}*")
    alternatives.append(f"{char}*[A-Za-z]{{33}}{char}*")
    alternatives.append(rf"\.{char}{{{min_len - 1},}}|[A-Za-z]\.{char}{{{min_len - 2},}}")
    return "(?-i:" + "|".join(alternatives) + ")"


_NOT_PLAIN_TOKEN = _not_plain_word(8)


def after_space(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`<scheme> <secret>`: what follows the first run of spaces, unless a plain word."""
    start, end = m.span()
    secret = buf[start:end].split(None, 1)[1]
    if is_plain_word(secret.rstrip(b".")):  # "the token endpoint."
        return None
    return marker_hit(end - len(secret), end, secret, ctx)


def url_password(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`://user:<secret>@`: between the first `:` after the scheme and the `@`."""
    start, end = m.span()
    colon = buf.index(b":", start + 3, end)
    return marker_hit(colon + 1, end - 1, buf[colon + 1 : end - 1], ctx)


def after_equals(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """`AccountKey=<secret>`."""
    start, end = m.span()
    eq = buf.index(b"=", start, end)
    return marker_hit(eq + 1, end, buf[eq + 1 : end], ctx)


def after_last_slash(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """A Slack webhook's last path segment is its secret (the others name the workspace)."""
    start, end = m.span()
    slash = buf.rindex(b"/", start, end)
    return marker_hit(slash + 1, end, buf[slash + 1 : end], ctx)


def email(buf: bytes, m: Match, ctx: Context) -> Hit | None:
    """An e-mail address, except `git@host`: an SSH remote, not a person."""
    start, end = m.span()
    if buf.startswith(b"git@", start):
        return None
    return marker_hit(start, end, buf[start:end], ctx)


# (name, pattern, picker, triggers). Order matters: each rule runs on the previous one's output,
# so the rules that see the most context (a whole key block, a URL) come first: BLOCKS, then the
# URL's query and the headers (`embedded`), then KEY_SHAPES.
BLOCKS: tuple[tuple[str, str, Picker, tuple[str, ...]], ...] = (
    (
        "private_key_block",
        r"-----BEGIN [A-Z ]{0,64}PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"-----END [A-Z ]{0,64}PRIVATE KEY(?: BLOCK)?-----",
        whole,
        ("private key",),
    ),
    # A key cut short (a truncated tool result): the header and the base64 that follows.
    (
        "private_key_block",
        r"-----BEGIN [A-Z ]{0,64}PRIVATE KEY(?: BLOCK)?-----[A-Za-z0-9+/=\s\\:,.-]*",
        whole,
        ("private key",),
    ),
    ("jwt", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*", whole, ("eyj",)),
    # Anchored on `://`: the scheme in front adds nothing to find the password after the user.
    ("url_password", r"://[^/\s:@]*:[^/\s@]+@", url_password, ("://",)),
)
KEY_SHAPES: tuple[tuple[str, str, Picker, tuple[str, ...]], ...] = (
    ("bearer", r"(?i)\b(?:bearer|token)\s+" + _NOT_PLAIN_TOKEN, after_space, ("bearer", "token")),
    ("basic_auth", r"(?i)\bbasic\s+[A-Za-z0-9+/]{8,}={0,2}", after_space, ("basic",)),
    ("openai_anthropic_key", r"\bsk-[A-Za-z0-9_-]{16,}", with_digit, ("sk-",)),
    (
        "stripe_key",
        r"\b(?:[sr]k_(?:live|test)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{20,})",
        whole,
        ("k_live_", "k_test_", "whsec_"),
    ),
    (
        "github_token",
        r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})",
        whole,
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    ("gitlab_token", r"\bgl(?:pat|dt|rt|ptt|oas)-[A-Za-z0-9_-]{20,}", whole, ("gl",)),
    ("aws_access_key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", whole, ("akia", "asia")),
    (
        "slack_token",
        r"\bxox[abposre]-[A-Za-z0-9-]{10,}|\bxapp-[0-9]-[A-Za-z0-9-]{10,}",
        whole,
        ("xox", "xapp-"),
    ),
    (
        "slack_webhook",
        r"hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/[A-Za-z0-9_]{8,}",
        after_last_slash,
        ("hooks.slack.com",),
    ),
    ("google_api_key", r"\bAIza[0-9A-Za-z_-]{35}", whole, ("aiza",)),
    (
        "google_oauth",
        r"\bya29\.[0-9A-Za-z_-]{20,}|\bGOCSPX-[0-9A-Za-z_-]{20,}",
        whole,
        ("ya29.", "gocspx-"),
    ),
    (
        "azure_storage_key",
        r"(?i)\baccountkey=[A-Za-z0-9+/]{40,}={0,2}",
        after_equals,
        ("accountkey=",),
    ),
    ("sendgrid_key", r"\bSG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{16,64}", whole, ("sg.",)),
    ("npm_token", r"\bnpm_[A-Za-z0-9]{36}\b", whole, ("npm_",)),
    ("pypi_token", r"\bpypi-AgE[A-Za-z0-9_-]{50,}", whole, ("pypi-age",)),
    ("huggingface_token", r"\bhf_[A-Za-z0-9]{30,}\b", whole, ("hf_",)),
    ("telegram_bot_token", r"\b[0-9]{8,10}:AA[0-9A-Za-z_-]{33}\b", whole, (":aa",)),
    ("mailchimp_key", r"\b[0-9a-f]{32}-us[0-9]{1,2}\b", whole, ("-us",)),
    ("digitalocean_token", r"\bdo[opr]_v1_[a-f0-9]{64}\b", whole, ("_v1_",)),
    ("shopify_token", r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}\b", whole, ("shp",)),
)

# Run last: an e-mail address is found anywhere, and the rules above may hold one (a URL's user).
EMAIL: tuple[str, str, Picker, tuple[str, ...]] = (
    "email",
    r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}\b",
    email,
    ("@",),
)


def make_rule(spec: tuple[str, str, Picker, tuple[str, ...]]) -> Rule:
    name, pattern, pick, triggers = spec
    return Rule(name, compile_builtin(pattern), pick, tuple(t.encode() for t in triggers))
