"""The checkpoints file: notes appended under a lock, sizes only growing, the last one found from
the file's tail however long the file grows."""

from __future__ import annotations

from pathlib import Path

from blackbox.recorder.trust import signing
from blackbox.recorder.trust.checkpoint import Checkpoint, Signer, open_checkpoint, sign_checkpoint


def test_the_last_checkpoint_is_read_from_the_tail_of_a_long_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoints.txt"
    signer = Signer.generate("a.example/log")
    for n in range(1, 200):
        note = sign_checkpoint(Checkpoint("a.example/log", n, bytes(32)), signer)
        signing.append_to_file(path, note, n)
        assert signing._last_in_file(path).size == n
    assert path.stat().st_size > 4 * signing._TAIL_BYTES
    older = sign_checkpoint(Checkpoint("a.example/log", 5, bytes(32)), signer)
    signing.append_to_file(path, older, 5)  # a shipper finishing late: not appended
    notes = signing.split_notes(path.read_text())
    assert len(notes) == 199
    assert all(open_checkpoint(n, [signer.verifier])[0] is not None for n in notes)
    assert signing._last_in_file(path).size == 199
