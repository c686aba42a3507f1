"""The Merkle tree over the whole log, exactly as RFC 9162 §2.1 (Certificate Transparency v2,
the same tree as RFC 6962) defines it, so that third-party tools can check our roots and proofs.

A per-session hash chain proves a session is consistent with itself; it cannot show that a whole
session was removed or rewritten with recomputed hashes. One tree over every record, whose signed
size and root are kept away from the database, can. This module is the tree alone: pure, no
storage, no signing (recorder/trust/checkpoint.py signs). Proof generation asks a callback for the
hash of a perfect subtree, so a store answers from leaf hashes or cached subtree hashes and this
module never knows about SQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence

HASH_SIZE = 32
# RFC 9162 §2.1.1: the hash of an empty list is the hash of an empty string.
EMPTY_ROOT = hashlib.sha256(b"").digest()

SubtreeHash = Callable[[int, int], bytes]
"""`subtree_hash(start, end)`: the hash of the perfect subtree over leaves [start, end).

Proof generation only ever asks for perfect, aligned subtrees: `end - start` is a power of two
and `start` is a multiple of it. Such a subtree is a node of every tree that contains it, so a
store can cache its hash once and answer every later proof from the cache."""

_sha256 = hashlib.sha256
_LEAF = b"\x00"
_NODE = b"\x01"


def leaf_hash(leaf: bytes) -> bytes:
    """MTH({d}) = SHA-256(0x00 || d) (RFC 9162 §2.1.1)."""
    return _sha256(_LEAF + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """The hash of an interior node: SHA-256(0x01 || left || right) (RFC 9162 §2.1.1)."""
    return _sha256(_NODE + left + right).digest()


def extend_frontier(
    stack: list[bytes], size: int, leaf_hashes: Iterable[bytes], stride: int = 0
) -> tuple[int, list[tuple[int, int, bytes]]]:
    """The merge loop, the one place it is written: append leaves (their hashes) on the right of
    the frontier `stack` of a tree of `size` leaves, in place, and return the new size.

    The frontier holds the perfect subtrees of the RFC's split, largest and leftmost first; each
    new leaf is pushed and every completed pair of equal-sized subtrees merged at once, so memory
    is O(log n) and a leaf costs one push plus, on average, one node hash. With `stride`, the
    nodes completed at heights that are multiples of it are also returned as (height, index,
    hash): what a store caches to answer proofs. No helper call per leaf: this runs over every
    record when an auditor recomputes the root."""
    push, pop, sha, node = stack.append, stack.pop, _sha256, _NODE
    n = size
    done: list[tuple[int, int, bytes]] = []
    if not stride:
        for h in leaf_hashes:
            n += 1
            m = n
            while not m & 1:
                h = sha(node + pop() + h).digest()
                m >>= 1
            push(h)
        return n, done
    for h in leaf_hashes:
        n += 1
        m, height = n, 0
        while not m & 1:
            h = sha(node + pop() + h).digest()
            m >>= 1
            height += 1
            if not height % stride:
                done.append((height, (n >> height) - 1, h))
        push(h)
    return n, done


def fold(subtrees: Sequence[bytes]) -> bytes:
    """Fold a frontier's perfect subtree hashes (largest, leftmost first) into the root, right to
    left: MTH(D[n]) of the tree they are the split of."""
    if not subtrees:
        return EMPTY_ROOT
    h = subtrees[-1]
    for left in reversed(subtrees[:-1]):
        h = _sha256(_NODE + left + h).digest()
    return h


def root(leaf_hashes: Iterable[bytes]) -> bytes:
    """The root of the tree whose leaves have these hashes, recomputed from all of them.

    A streaming fold: leaf hashes go on a stack and each completed pair of equal-sized subtrees
    is merged at once, so memory is O(log n) and each leaf costs one push plus, on average, one
    node hash. The subtrees left on the stack are exactly the perfect subtrees of the RFC's
    split (largest power of two below n, recursively), so folding them right to left gives
    MTH(D[n]) (`extend_frontier`, `fold`)."""
    stack: list[bytes] = []
    extend_frontier(stack, 0, leaf_hashes)
    return fold(stack)


def root_from_leaves(leaves: Iterable[bytes]) -> bytes:
    """The root of the tree over these leaf inputs: `root(map(leaf_hash, leaves))`, the leaf
    hashing done in a generator rather than a call per leaf."""
    sha, leaf = _sha256, _LEAF
    return root(sha(leaf + d).digest() for d in leaves)


def _largest_power_of_two_below(n: int) -> int:
    """k such that k < n <= 2k (n > 1): where RFC 9162 splits a tree of n leaves."""
    return 1 << ((n - 1).bit_length() - 1)


def _range_hash(start: int, end: int, subtree_hash: SubtreeHash) -> bytes:
    """MTH(D[start:end]) for a range the RFC's recursion produces, from perfect subtrees.

    A tree of n leaves is the right fold of the perfect subtrees given by the binary digits of n,
    largest first; each piece is aligned because `start` is a multiple of a power of two at least
    as large as the range (true of every range the recursion visits)."""
    pieces: list[bytes] = []
    s, n = start, end - start
    while n:
        w = 1 << (n.bit_length() - 1)
        pieces.append(subtree_hash(s, s + w))
        s += w
        n -= w
    return fold(pieces)


def root_at(size: int, subtree_hash: SubtreeHash) -> bytes:
    """The root of the first `size` leaves, from at most log2(size) perfect subtree hashes."""
    if size < 0:
        raise ValueError(f"tree size {size} is negative")
    return _range_hash(0, size, subtree_hash) if size else EMPTY_ROOT


def inclusion_proof(index: int, size: int, subtree_hash: SubtreeHash) -> list[bytes]:
    """PATH(index, D[size]) of RFC 9162 §2.1.3.1, leaf side first: the hashes that, with leaf
    `index`, recompute the root of the first `size` leaves."""
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is not in a tree of {size} leaves")
    path: list[bytes] = []
    start, end, m = 0, size, index
    while end - start > 1:
        k = _largest_power_of_two_below(end - start)
        if m < k:
            path.append(_range_hash(start + k, end, subtree_hash))
            end = start + k
        else:
            path.append(subtree_hash(start, start + k))
            start += k
            m -= k
    path.reverse()
    return path


def consistency_proof(old_size: int, new_size: int, subtree_hash: SubtreeHash) -> list[bytes]:
    """PROOF(old_size, D[new_size]) of RFC 9162 §2.1.4.1: the hashes that show the tree of
    `old_size` leaves is a prefix of the tree of `new_size` leaves. Empty when the sizes are
    equal or the old tree is empty (both trivially consistent)."""
    if not 0 <= old_size <= new_size:
        raise ValueError(f"no consistency proof from {old_size} leaves to {new_size}")
    if old_size in (0, new_size):
        return []
    # SUBPROOF(m, D[start:end], b), unrolled: each step records the sibling it appends after
    # the recursive part, so the collected siblings are reversed behind the terminal element.
    siblings: list[bytes] = []
    start, end, m, whole = 0, new_size, old_size, True
    while m != end - start:
        k = _largest_power_of_two_below(end - start)
        if m <= k:
            siblings.append(_range_hash(start + k, end, subtree_hash))
            end = start + k
        else:
            siblings.append(subtree_hash(start, start + k))
            start += k
            m -= k
            whole = False
    # SUBPROOF(m, D[m], true) = {} (the old root itself); SUBPROOF(m, D[m], false) = {MTH(D[m])}.
    proof = [] if whole else [_range_hash(start, end, subtree_hash)]
    proof.extend(reversed(siblings))
    return proof


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_SIZE


def verify_inclusion(
    leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> bool:
    """Whether `proof` shows the leaf with hash `leaf_hash` at `index` in the tree of `size`
    leaves whose root is `root`: the algorithm of RFC 9162 §2.1.3.2, step by step. Never raises;
    a malformed argument (a hash of the wrong length, a negative index) is a failed proof."""
    if not (_is_hash(leaf_hash) and _is_hash(root) and all(_is_hash(p) for p in proof)):
        return False
    if not (isinstance(index, int) and isinstance(size, int)) or not 0 <= index < size:
        return False
    fn, sn = index, size - 1
    r = leaf_hash
    for p in proof:
        if sn == 0:  # more elements than the path has levels
            return False
        if fn & 1 or fn == sn:
            r = _sha256(_NODE + p + r).digest()
            # fn == sn on an even fn: the right edge, where the RFC tree skips levels.
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            r = _sha256(_NODE + r + p).digest()
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """Whether `proof` shows the tree (old_size, old_root) is a prefix of (new_size, new_root):
    the algorithm of RFC 9162 §2.1.4.2, step by step, for 0 < old_size < new_size.

    The cases the RFC leaves out are decided as transparency-dev/merkle does, one step stricter:
    equal sizes need an empty proof and equal roots; an empty old tree needs an empty proof and
    the empty root. Never raises."""
    if not (_is_hash(old_root) and _is_hash(new_root) and all(_is_hash(p) for p in proof)):
        return False
    if not (isinstance(old_size, int) and isinstance(new_size, int)):
        return False
    if not 0 <= old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root and (old_size > 0 or old_root == EMPTY_ROOT)
    if old_size == 0:
        return not proof and old_root == EMPTY_ROOT
    # 1. An empty proof fails.  2. If old_size is a power of two, prepend old_root.
    if not proof:
        return False
    path = list(proof)
    if old_size & (old_size - 1) == 0:
        path.insert(0, old_root)
    # 3.-4. fn = old_size - 1, sn = new_size - 1; shift both right while LSB(fn) is set.
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    # 5. fr and sr start at the first element.  6. Fold in the rest.
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = _sha256(_NODE + c + fr).digest()
            sr = _sha256(_NODE + c + sr).digest()
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            sr = _sha256(_NODE + sr + c).digest()
        fn >>= 1
        sn >>= 1
    # 7. Both roots recomputed and the path exhausted exactly.
    return fr == old_root and sr == new_root and sn == 0


class Frontier:
    """The compact range [0, size): the hashes of the perfect subtrees on the tree's right edge,
    one per set bit of `size`, largest (leftmost) first.

    It is all a log needs to keep to extend its tree: appending k leaves costs O(k + log n)
    hashes, and the root at the current size is a fold of at most log2(n) hashes. A store keeps
    it with `to_bytes`/`to_json` and rebuilds it with `decode`/`from_json`. It is a cache for the
    writer, never evidence: a verifier recomputes the root from the records themselves."""

    __slots__ = ("_hashes", "_size")

    def __init__(self) -> None:
        self._size = 0
        self._hashes: list[bytes] = []

    @classmethod
    def of(cls, leaf_hashes: Iterable[bytes]) -> Frontier:
        frontier = cls()
        frontier.extend(leaf_hashes)
        return frontier

    @classmethod
    def _trusted(cls, size: int, hashes: list[bytes]) -> Frontier:
        frontier = cls()
        frontier._size = size
        frontier._hashes = hashes
        return frontier

    @property
    def size(self) -> int:
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        return tuple(self._hashes)

    def append(self, leaf_hash: bytes) -> None:
        self.extend((leaf_hash,))

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Append leaves (their hashes) on the right (`extend_frontier`)."""
        hashes = list(leaf_hashes)
        for h in hashes:
            if len(h) != HASH_SIZE:
                raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, not {len(h)}")
        self._size, _ = extend_frontier(self._hashes, self._size, hashes)

    def root(self) -> bytes:
        return fold(self._hashes)

    def copy(self) -> Frontier:
        return Frontier._trusted(self._size, list(self._hashes))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Frontier):
            return NotImplemented
        return self._size == other._size and self._hashes == other._hashes

    def __hash__(self) -> int:
        return hash((self._size, *self._hashes))

    def __repr__(self) -> str:
        return f"Frontier(size={self._size}, root={self.root().hex()})"

    def to_bytes(self) -> bytes:
        """8-byte big-endian size, then the subtree hashes, largest first."""
        return self._size.to_bytes(8, "big") + b"".join(self._hashes)

    @classmethod
    def decode(cls, data: bytes) -> tuple[Frontier | None, str | None]:
        """The inverse of `to_bytes`: (frontier, None) or (None, problem)."""
        if not isinstance(data, bytes | bytearray | memoryview) or len(data) < 8:
            return None, "a stored frontier is at least 8 bytes"
        data = bytes(data)
        size = int.from_bytes(data[:8], "big")
        body = data[8:]
        if len(body) != HASH_SIZE * size.bit_count():
            return None, (
                f"a frontier of {size} leaves holds {size.bit_count()} hashes, "
                f"not {len(body) / HASH_SIZE:g}"
            )
        hashes = [body[i : i + HASH_SIZE] for i in range(0, len(body), HASH_SIZE)]
        return cls._trusted(size, hashes), None

    def to_json(self) -> dict[str, object]:
        return {"size": self._size, "hashes": [h.hex() for h in self._hashes]}

    @classmethod
    def from_json(cls, value: object) -> tuple[Frontier | None, str | None]:
        """The inverse of `to_json`: (frontier, None) or (None, problem)."""
        if not isinstance(value, dict) or set(value) != {"size", "hashes"}:
            return None, "a stored frontier is an object with exactly size and hashes"
        size, hexes = value["size"], value["hashes"]
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or size >= 1 << 64:
            return None, "a frontier's size is a non-negative 64-bit integer"
        if not isinstance(hexes, list) or len(hexes) != size.bit_count():
            return None, f"a frontier of {size} leaves holds {size.bit_count()} hashes"
        hashes: list[bytes] = []
        for text in hexes:
            if not isinstance(text, str) or len(text) != 2 * HASH_SIZE:
                return None, f"a frontier hash is {2 * HASH_SIZE} hex digits"
            try:
                hashes.append(bytes.fromhex(text))
            except ValueError:
                return None, f"a frontier hash is {2 * HASH_SIZE} hex digits"
        return cls._trusted(size, hashes), None


def subtree_hash_from_leaves(
    get_leaf_hashes: Callable[[int, int], Sequence[bytes]],
) -> SubtreeHash:
    """A `SubtreeHash` for a store that can only read leaf hashes [start, end): each subtree is
    recomputed from its leaves (O(end - start) per call, so a proof costs O(size) in all)."""

    def subtree_hash(start: int, end: int) -> bytes:
        hashes = get_leaf_hashes(start, end)
        if len(hashes) != end - start:
            raise ValueError(f"asked for leaves [{start}, {end}), got {len(hashes)}")
        return root(hashes)

    return subtree_hash


class MemoryTree:
    """A whole tree in memory with every level kept, so any perfect subtree's hash is a lookup.

    The reference `SubtreeHash` for tests, tools and the benchmark; about 2n hashes of memory.
    `levels[h][i]` is the hash of leaves [i * 2**h, (i + 1) * 2**h)."""

    def __init__(self, leaf_hashes: Iterable[bytes] = ()) -> None:
        self._levels: list[list[bytes]] = [[]]
        self._frontier: list[bytes] = []
        self.extend(leaf_hashes)

    @property
    def size(self) -> int:
        return len(self._levels[0])

    def extend(self, leaf_hashes: Iterable[bytes]) -> None:
        """Append leaves; every node they complete (`extend_frontier` with stride 1) joins its
        level, in index order."""
        hashes = list(leaf_hashes)
        for h in hashes:
            if len(h) != HASH_SIZE:
                raise ValueError(f"a leaf hash is {HASH_SIZE} bytes, not {len(h)}")
        levels = self._levels
        _, nodes = extend_frontier(self._frontier, len(levels[0]), hashes, stride=1)
        levels[0].extend(hashes)
        for height, _index, h in nodes:
            if height == len(levels):
                levels.append([])
            levels[height].append(h)

    def append(self, leaf_hash: bytes) -> None:
        self.extend((leaf_hash,))

    def subtree_hash(self, start: int, end: int) -> bytes:
        width = end - start
        if width <= 0 or width & (width - 1) or start % width or end > self.size:
            raise ValueError(f"[{start}, {end}) is not a perfect subtree of {self.size} leaves")
        height = width.bit_length() - 1
        return self._levels[height][start >> height]

    def _size_or_current(self, size: int | None) -> int:
        if size is None:
            return self.size
        if not 0 <= size <= self.size:
            raise ValueError(f"the tree holds {self.size} leaves, not {size}")
        return size

    def root(self, size: int | None = None) -> bytes:
        return root_at(self._size_or_current(size), self.subtree_hash)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        return inclusion_proof(index, self._size_or_current(size), self.subtree_hash)

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        return consistency_proof(old_size, self._size_or_current(new_size), self.subtree_hash)


def leaf_ranges(indices: Iterable[int]) -> list[list[int]]:
    """Leaf indices as compact ranges: ascending `[first, last]` pairs (both inclusive), each
    starting at least two past the last one's end. How a signed removal and a bundle's manifest
    name a session's leaves (docs/trust.md)."""
    ranges: list[list[int]] = []
    for index in sorted(indices):
        if ranges and index <= ranges[-1][1] + 1:
            ranges[-1][1] = max(ranges[-1][1], index)
        else:
            ranges.append([index, index])
    return ranges
