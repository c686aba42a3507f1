"""Per-value commitments (recorder/log/commitment.py): the tokens, the commitment C, and what a
redacted record's disclosure lets through. Each attack is a bundle holder's move on what a
redacted record shows; each must change C (and so fail the record's inclusion proof)."""

from __future__ import annotations

import json
import random
import time

import pytest
from blackbox.recorder.log import commitment
from blackbox.recorder.log.chain import ChainRecord

KEY = bytes(range(32))
FRAME = (
    b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"login",'
    b'"arguments":{"user":"ada","password":"hunter2","retries":3,"ok":true,"n":null}}}\n'
)
RECORD = ChainRecord("s-1", 4, 1_790_000_000_000_000_000, 5, "frame", "c2s", FRAME, None, b"")


def salt() -> bytes:
    return commitment.record_salt(KEY, RECORD.session_id, RECORD.seq)


def withhold(raw: bytes, values: set[bytes]) -> commitment.Disclosure:
    split = commitment.tokens(raw)
    hidden = {i for i, t in enumerate(split.tokens) if t in values}
    assert hidden, values
    return commitment.disclose(
        raw, salt(), hidden, dict.fromkeys(hidden, "[redacted:0123456789abcdef]")
    )


def c(raw: bytes = FRAME, **change: object) -> bytes:
    """C of the record with these raw bytes (and header fields changed), shown whole."""
    return commitment.commit(RECORD._replace(raw=raw, **change), salt())


def c_of(shown: commitment.Disclosure, record: ChainRecord = RECORD) -> bytes:
    entries = json.loads(json.dumps(shown.as_json()))  # as a bundle carries them
    return commitment.commitment_of_disclosure(record._replace(raw=shown.raw), entries)


def test_tokens_and_skeleton_give_back_the_raw_bytes_whatever_they_are() -> None:
    rng = random.Random(39)
    samples = [FRAME, b"", b"not json at all: 42 {", b'"unterminated \\', b'{"a":"\\"}"}']
    samples += [rng.randbytes(rng.randrange(0, 200)) for _ in range(300)]
    samples += [bytes(rng.choice(b'"\\{}[],: \nab1') for _ in range(80)) for _ in range(300)]
    for raw in samples:
        split = commitment.tokens(raw)
        assert len(split.skeleton) == len(split.tokens) + 1
        assert split.joined() == raw
        assert all(split.tokens)  # no empty token


def test_a_frame_is_cut_at_its_values_and_its_keys_stay_in_the_skeleton() -> None:
    split = commitment.tokens(b'{"a": [1, "x y", true], "b\\"" : null}')
    assert split.tokens == [b"1", b'"x y"', b"true", b"null"]
    assert split.skeleton == [b'{"a": [', b", ", b", ", b'], "b\\"" : ', b"}"]


def test_a_marker_before_a_colon_is_still_a_token() -> None:
    """Where a withheld value of a text that is not JSON stood before a colon, its marker stays
    a token: the shown bytes cut as the original did."""
    raw = b"code 42: failed"
    split = commitment.tokens(raw)
    shown = commitment.disclose(raw, salt(), {1}, {1: "[redacted:0123456789abcdef]"})
    assert commitment.tokens(shown.raw).skeleton == split.skeleton
    assert c_of(shown) == c(raw)


def test_a_hostile_run_of_quotes_and_backslashes_is_cut_in_linear_time() -> None:
    """A string that never closes is one token to the end: were it no token, every quote after
    it would scan to the end again (quadratic: 6 s for 20,000 of them, hours for this frame)."""
    hostile = b'"' + b'\\"' * 1_000_000
    started = time.perf_counter()
    split = commitment.tokens(hostile)
    assert time.perf_counter() - started < 5
    assert split.tokens == [hostile]


@pytest.mark.parametrize(
    "hostile",
    [
        pytest.param(b"[" * 2_000_000, id="skeleton-with-no-token-after"),
        pytest.param(b'{"a":' * 400_000, id="keys-with-no-value"),
        pytest.param(b'"a" ' * 500_000, id="strings-with-space-no-colon"),
    ],
)
def test_hostile_frames_of_skeleton_and_keys_are_cut_in_linear_time(hostile: bytes) -> None:
    """2 MB a frame: a scan that retried the trailing skeleton from each of its bytes, or grew
    the skeleton by copying it at each key, takes minutes here."""
    started = time.perf_counter()
    split = commitment.tokens(hostile)
    assert time.perf_counter() - started < 2
    assert split.joined() == hostile


def test_c_covers_every_byte_and_header_field() -> None:
    whole = c()
    assert whole != c(FRAME.replace(b'"id":7', b'"id": 7'))
    assert whole != c(FRAME.replace(b"ada", b"eve"))
    for change in ({"seq": 5}, {"wall_ns": 1}, {"kind": "decision"}, {"raw_size": 10}):
        assert whole != c(**change)
    assert whole != commitment.commit(RECORD, commitment.record_salt(KEY, "s-1", 5))


def test_a_disclosure_gives_back_the_same_commitment() -> None:
    shown = withhold(FRAME, {b'"hunter2"'})
    assert b"hunter2" not in shown.raw and b'"[redacted:0123456789abcdef]"' in shown.raw
    assert c_of(shown) == c()
    kinds = [kind for kind, _ in shown.entries]
    assert kinds.count("digest") == 1 and len(kinds) == len(commitment.tokens(FRAME).tokens)


def test_a_disclosure_of_a_frame_of_thousands_of_tokens_gives_back_the_same_commitment() -> None:
    """Past the token indexes `commit` packs ahead of time (1,024), its salts are still s_i."""
    values = b",".join(b'"v%d"' % i for i in range(3000))
    frame = b'{"jsonrpc":"2.0","id":1,"result":[' + values + b"]}"
    shown = withhold(frame, {b'"v2999"'})
    assert c_of(shown) == c(frame)


def test_editing_a_shown_value_fails() -> None:
    shown = withhold(FRAME, {b'"hunter2"'})
    edited = shown._replace(raw=shown.raw.replace(b'"ada"', b'"eve"'))
    assert c_of(edited) != c()


def test_editing_the_skeleton_fails() -> None:
    shown = withhold(FRAME, {b'"hunter2"'})
    edited = shown._replace(raw=shown.raw.replace(b'"retries":3', b'"retries": 3'))
    assert c_of(edited) != c()


def test_editing_the_header_of_a_redacted_record_fails() -> None:
    shown = withhold(FRAME, {b'"hunter2"'})
    assert c_of(shown, RECORD._replace(wall_ns=RECORD.wall_ns + 1)) != c()


def test_moving_a_withheld_value_fails() -> None:
    """The marker and its digest moved to another value's place (and that value's salt to the
    marker's): the digests no longer sit in their tokens' order."""
    shown = withhold(FRAME, {b'"hunter2"'})
    split = commitment.tokens(shown.raw)
    i = next(k for k, (kind, _) in enumerate(shown.entries) if kind == "digest")
    j = split.tokens.index(b'"ada"')
    tokens = list(split.tokens)
    tokens[i], tokens[j] = tokens[j], tokens[i]
    entries = list(shown.entries)
    entries[i], entries[j] = entries[j], entries[i]
    moved = commitment.Disclosure(split.joined(tokens), entries)
    assert c_of(moved) != c()


def test_a_guessed_secret_in_place_of_a_marker_does_not_match() -> None:
    """Showing a guess where the secret was withheld needs the token's salt, which the bundle
    does not hold: with any other salt the digest differs."""
    shown = withhold(FRAME, {b'"hunter2"'})
    i = next(k for k, (kind, _) in enumerate(shown.entries) if kind == "digest")
    entries = list(shown.entries)
    entries[i] = ("salt", bytes(32))
    guessed = commitment.Disclosure(
        shown.raw.replace(b'"[redacted:0123456789abcdef]"', b'"hunter2"'), entries
    )
    assert c_of(guessed) != c()


def test_a_withheld_token_must_show_as_a_marker() -> None:
    shown = withhold(FRAME, {b'"hunter2"'})
    edited = shown._replace(
        raw=shown.raw.replace(b'"[redacted:0123456789abcdef]"', b'"[redacted:see below]"')
    )
    with pytest.raises(commitment.NotCommitted, match="not a marker"):
        c_of(edited)


def test_a_disclosure_that_does_not_fit_its_tokens_is_refused() -> None:
    shown = withhold(FRAME, {b'"hunter2"'})
    with pytest.raises(commitment.NotCommitted, match="token"):
        commitment.commitment_of_disclosure(RECORD._replace(raw=shown.raw), shown.as_json()[:-1])
    for bad in (["pepper", "00" * 32], ["salt", "zz"], ["salt", "00"], 7):
        entries = shown.as_json()
        entries[0] = bad
        with pytest.raises(commitment.NotCommitted):
            commitment.commitment_of_disclosure(RECORD._replace(raw=shown.raw), entries)


def test_record_salts_differ_per_record_and_key() -> None:
    salts = {
        commitment.record_salt(key, sid, seq)
        for key in (KEY, bytes(32))
        for sid in ("s-1", "s-2")
        for seq in (1, 2)
    }
    assert len(salts) == 8


def test_the_store_cuts_tokens_as_the_page_s_regular_expression() -> None:
    """The store cuts a frame with one pattern of (skeleton, token) pairs, not the page's token
    pattern with the keys taken out after (docs/trust.md, "Commitments"): both must give the
    same tokens, keys and markers included, for any bytes, or C would differ from what an
    auditor computes from the page."""
    from tests.fixtures.independent_verifier import page_tokens

    marker = b"[redacted:0123456789abcdef]"
    rng = random.Random(23)
    alphabet = b' \t\n\r{}[],:"\\ab1-.\x00\xff' + marker
    samples = [
        b"",
        b'"',
        b'"\\',
        b'{"a":1}',
        b'{"a" : "b" }  ',
        b'"a""b"',
        b'abc"def":1',
        b'"' + marker + b'":1',
        b'"' + marker + marker + b'" :x',
        b'"' + marker + b'x":1',
        b'{"k":"' + marker + b'"}',
        *(bytes(rng.choice(alphabet) for _ in range(rng.randrange(60))) for _ in range(5000)),
        *(rng.randbytes(rng.randrange(60)) for _ in range(1000)),
    ]
    for raw in samples:
        split = commitment.tokens(raw)
        assert split.tokens == page_tokens(raw), raw
        assert split.joined() == raw, raw
