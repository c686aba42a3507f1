"""The RFC 9162 Merkle tree against the reference vectors, then every proof of many trees, and the
attacker's moves against each verifier."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest
from blackbox.recorder.log import merkle
from blackbox.recorder.log.merkle import (
    EMPTY_ROOT,
    Frontier,
    MemoryTree,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root,
    root_at,
    root_from_leaves,
    subtree_hash_from_leaves,
    verify_consistency,
    verify_inclusion,
)


def h(text: str) -> bytes:
    return bytes.fromhex(text)


# Reference vectors of Certificate Transparency's RFC 6962 tree, as published by
# github.com/transparency-dev/merkle in testonly/constants.go (LeafInputs, NodeHashes,
# RootHashes) and cmd/proofgen/main.go (inclusionProofs, consistencyProofs; that file numbers
# leaves from 1, the indices below are from 0).
LEAVES = [
    h(""),
    h("00"),
    h("10"),
    h("2021"),
    h("3031"),
    h("40414243"),
    h("5051525354555657"),
    h("606162636465666768696a6b6c6d6e6f"),
]
NODE_HASHES = [
    [
        h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
        h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
        h("0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7"),
        h("07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7"),
        h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        h("4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658"),
        h("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
        h("46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1"),
    ],
    [
        h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
        h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
        h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
        h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
    ],
    [
        h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
    ],
    [h("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")],
]
ROOTS = [
    h("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
    h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
    h("aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77"),
    h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    h("4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4"),
    h("76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef"),
    h("ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c"),
    h("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"),
]
# (leaf index, tree size, proof)
INCLUSION_PROOFS = [
    (0, 1, []),
    (
        0,
        8,
        [
            h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        5,
        8,
        [
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
            h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (2, 3, [h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125")]),
    (
        1,
        5,
        [
            h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
]
# (old size, new size, proof)
CONSISTENCY_PROOFS = [
    (1, 1, []),
    (
        1,
        8,
        [
            h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"),
        ],
    ),
    (
        6,
        8,
        [
            h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
    (
        2,
        5,
        [
            h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
            h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
        ],
    ),
    (
        6,
        7,
        [
            h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
            h("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
            h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
        ],
    ),
]
# From the same cmd/proofgen/main.go: a hash that is no root of anything.
SOME_HASH = h("abacaba000000000000000000000000000000000000000000060061e00123456")

LEAF_HASHES = [leaf_hash(leaf) for leaf in LEAVES]


def flip(value: bytes, bit: int = 3) -> bytes:
    return bytes([value[0] ^ (1 << bit)]) + value[1:]


# --- the reference vectors ---


def test_leaf_and_node_hashes_are_the_reference_ones():
    assert NODE_HASHES[0] == LEAF_HASHES
    assert node_hash(NODE_HASHES[0][0], NODE_HASHES[0][1]) == NODE_HASHES[1][0]
    assert EMPTY_ROOT == hashlib.sha256(b"").digest() == ROOTS[0]


@pytest.mark.parametrize("size", range(9))
def test_roots_of_0_to_8_leaves_are_the_reference_ones(size):
    assert root(LEAF_HASHES[:size]) == ROOTS[size]
    assert root_from_leaves(LEAVES[:size]) == ROOTS[size]
    assert Frontier.of(LEAF_HASHES[:size]).root() == ROOTS[size]
    assert MemoryTree(LEAF_HASHES).root(size) == ROOTS[size]
    assert root_at(size, subtree_hash_from_leaves(lambda s, e: LEAF_HASHES[s:e])) == ROOTS[size]


def test_every_perfect_subtree_hash_is_the_reference_one():
    tree = MemoryTree(LEAF_HASHES)
    for height, row in enumerate(NODE_HASHES):
        width = 1 << height
        assert [tree.subtree_hash(i * width, (i + 1) * width) for i in range(len(row))] == row


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION_PROOFS)
def test_inclusion_proofs_are_the_reference_ones(index, size, proof):
    tree = MemoryTree(LEAF_HASHES)
    assert tree.inclusion_proof(index, size) == proof
    from_leaves = subtree_hash_from_leaves(lambda start, end: LEAF_HASHES[start:end])
    assert inclusion_proof(index, size, from_leaves) == proof
    assert verify_inclusion(LEAF_HASHES[index], index, size, proof, ROOTS[size])


@pytest.mark.parametrize(("index", "size", "proof"), INCLUSION_PROOFS)
def test_reference_inclusion_proofs_corrupted_are_refused(index, size, proof):
    # The corruptions transparency-dev's proofgen writes as probes, each one expected to fail.
    leaf, good_root = LEAF_HASHES[index], ROOTS[size]
    probes = [
        (leaf, index - 1, size, proof, good_root),
        (leaf, index + 1, size, proof, good_root),
        (leaf, index ^ 2, size, proof, good_root),
        (leaf, index, size * 2, proof, good_root),
        (leaf, index, size // 2, proof, good_root),
        (b"WrongLeaf", index, size, proof, good_root),
        (leaf, index, size, proof, EMPTY_ROOT),
        (leaf, index, size, proof, SOME_HASH),
        (leaf, index, size, [*proof, b""], good_root),
        (leaf, index, size, [*proof, good_root], good_root),
        (leaf, index, size, [b"", *proof], good_root),
        (leaf, index, size, [good_root, *proof], good_root),
    ]
    probes += [
        (leaf, index, size, [*proof[:i], flip(proof[i]), *proof[i + 1 :]], good_root)
        for i in range(len(proof))
    ]
    if proof:
        probes.append((leaf, index, size, proof[:-1], good_root))
    if len(proof) > 1:
        probes.append((leaf, index, size, [proof[0], SOME_HASH, *proof[1:]], good_root))
    for probe in probes:
        assert not verify_inclusion(*probe), probe


def test_inclusion_in_the_one_leaf_tree_and_in_empty_trees():
    one = leaf_hash(b"data")
    assert verify_inclusion(one, 0, 1, [], one)
    assert not verify_inclusion(b"", 0, 1, [], one)
    assert not verify_inclusion(one, 0, 1, [], b"")
    for index, size in [(0, 0), (0, 1), (1, 0), (2, 1)]:
        assert not verify_inclusion(SOME_HASH, index, size, [], EMPTY_ROOT)


@pytest.mark.parametrize(("old", "new", "proof"), CONSISTENCY_PROOFS)
def test_consistency_proofs_are_the_reference_ones(old, new, proof):
    assert MemoryTree(LEAF_HASHES).consistency_proof(old, new) == proof
    assert verify_consistency(old, new, ROOTS[old], ROOTS[new], proof)


@pytest.mark.parametrize(("old", "new", "proof"), [p for p in CONSISTENCY_PROOFS if p[2]])
def test_reference_consistency_proofs_corrupted_are_refused(old, new, proof):
    r1, r2 = ROOTS[old], ROOTS[new]
    probes = [
        (old - 1, new, r1, r2, proof),
        (old + 1, new, r1, r2, proof),
        (old ^ 2, new, r1, r2, proof),
        (old, new * 2, r1, r2, proof),
        (old, new // 2, r1, r2, proof),
        (old, new, b"WrongRoot", r2, proof),
        (old, new, r1, b"WrongRoot", proof),
        (old, new, r2, r1, proof),
        (old, new, r1, r2, []),
        (old, new, r1, r2, [*proof, b""]),
        (old, new, r1, r2, [*proof, r1]),
        (old, new, r1, r2, [*proof, r2]),
        (old, new, r1, r2, [b"", *proof]),
        (old, new, r1, r2, [r1, *proof]),
        (old, new, r1, r2, [r2, *proof]),
        (old, new, r1, r2, [proof[0], *proof]),
        (old, new, r1, r2, proof[:-1]),
    ]
    probes += [
        (old, new, r1, r2, [*proof[:i], flip(proof[i], 4), *proof[i + 1 :]])
        for i in range(len(proof))
    ]
    for probe in probes:
        assert not verify_consistency(*probe), probe


def test_consistency_edge_cases():
    # After transparency-dev's static probes. Two decisions of ours: every root must be a
    # 32-byte hash, and the empty tree is consistent with any tree when its root is the empty
    # root and the proof is empty (transparency-dev refuses size 0 outright).
    other = SOME_HASH
    assert verify_consistency(1, 1, other, other, [])
    assert not verify_consistency(1, 1, EMPTY_ROOT, other, [])
    assert not verify_consistency(0, 0, EMPTY_ROOT, other, [])
    assert not verify_consistency(1, 1, other, other, [EMPTY_ROOT])
    assert not verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT])
    assert not verify_consistency(1, 0, other, other, [])
    assert not verify_consistency(2, 1, other, other, [])
    assert not verify_consistency(1, 2, ROOTS[1], ROOTS[2], [])
    assert not verify_consistency(0, 1, EMPTY_ROOT, EMPTY_ROOT, [EMPTY_ROOT])
    assert verify_consistency(0, 1, EMPTY_ROOT, ROOTS[1], [])
    assert not verify_consistency(0, 1, other, ROOTS[1], [])  # a forged root for the empty tree
    assert not verify_consistency(-1, 1, EMPTY_ROOT, ROOTS[1], [])


# --- every proof of many trees, and the attacker's moves ---


def random_tree(rng: random.Random, size: int) -> MemoryTree:
    return MemoryTree(leaf_hash(rng.randbytes(32)) for _ in range(size))


def sizes_to_check() -> list[int]:
    rng = random.Random(16)
    return [*range(0, 34), 63, 64, 65, 127, 128, 129, *sorted(rng.sample(range(130, 301), 6))]


@pytest.mark.parametrize("size", sizes_to_check())
def test_every_inclusion_proof_verifies_and_tampering_is_refused(size):
    rng = random.Random(size)
    tree = random_tree(rng, size + 1)
    good_root, next_root = tree.root(size), tree.root(size + 1)
    assert good_root == root(tree.subtree_hash(i, i + 1) for i in range(size))
    for index in range(size):
        leaf = tree.subtree_hash(index, index + 1)
        proof = tree.inclusion_proof(index, size)
        assert verify_inclusion(leaf, index, size, proof, good_root)
        # The proof is as short as the RFC says: one hash per level of the leaf's path.
        assert len(proof) <= (size - 1).bit_length()
        # A forged root.
        assert not verify_inclusion(leaf, index, size, proof, flip(good_root))
        # A proof from an older tree held against the newer root. (The size alone is not bound
        # by an inclusion proof where the leaf's path has the same shape in both sizes: the
        # signed checkpoint binds the size to the root.)
        assert not verify_inclusion(leaf, index, size + 1, proof, next_root)
        assert not verify_inclusion(leaf, index, size, proof, next_root)
        # The same proof claimed for another leaf, or at another index.
        if size > 1:
            other = (index + 1) % size
            other_leaf = tree.subtree_hash(other, other + 1)
            assert not verify_inclusion(other_leaf, index, size, proof, good_root)
            assert not verify_inclusion(leaf, other, size, proof, good_root)
        # A truncated proof, an extra element, a changed element.
        if proof:
            assert not verify_inclusion(leaf, index, size, proof[:-1], good_root)
            assert not verify_inclusion(leaf, index, size, proof[1:], good_root)
            i = rng.randrange(len(proof))
            changed = [*proof[:i], flip(proof[i]), *proof[i + 1 :]]
            assert not verify_inclusion(leaf, index, size, changed, good_root)
        assert not verify_inclusion(leaf, index, size, [*proof, good_root], good_root)
        assert not verify_inclusion(leaf, index, size, [*proof, leaf], good_root)


@pytest.mark.parametrize("size", sizes_to_check())
def test_every_consistency_proof_verifies_and_tampering_is_refused(size):
    rng = random.Random(1000 + size)
    tree = random_tree(rng, size + 1)
    roots = [tree.root(n) for n in range(size + 2)]
    for old in range(size + 1):
        proof = tree.consistency_proof(old, size)
        assert verify_consistency(old, size, roots[old], roots[size], proof)
        if old in (0, size):
            assert proof == []
            continue
        assert len(proof) <= 2 * (size - 1).bit_length()
        # A rewritten history: the old root differs, or the new one does.
        assert not verify_consistency(old, size, flip(roots[old]), roots[size], proof)
        assert not verify_consistency(old, size, roots[old], flip(roots[size]), proof)
        # The proof held against a later tree, or presented for another old size.
        assert not verify_consistency(old, size + 1, roots[old], roots[size + 1], proof)
        assert not verify_consistency(old, size, roots[old], roots[size + 1], proof)
        if old > 1:
            assert not verify_consistency(old - 1, size, roots[old - 1], roots[size], proof)
        # A truncated proof, an extra element, a changed element.
        assert not verify_consistency(old, size, roots[old], roots[size], proof[:-1])
        assert not verify_consistency(old, size, roots[old], roots[size], [*proof, roots[size]])
        assert not verify_consistency(old, size, roots[old], roots[size], [roots[old], *proof])
        i = rng.randrange(len(proof))
        changed = [*proof[:i], flip(proof[i]), *proof[i + 1 :]]
        assert not verify_consistency(old, size, roots[old], roots[size], changed)


def test_consistency_between_every_pair_of_sizes_up_to_80():
    tree = random_tree(random.Random(80), 80)
    roots = [tree.root(n) for n in range(81)]
    for new in range(81):
        for old in range(new + 1):
            proof = tree.consistency_proof(old, new)
            assert verify_consistency(old, new, roots[old], roots[new], proof), (old, new)


def test_a_tree_with_one_record_rewritten_is_not_consistent_with_its_past():
    rng = random.Random(7)
    hashes = [leaf_hash(rng.randbytes(32)) for _ in range(100)]
    honest = MemoryTree(hashes)
    old_root = honest.root(60)
    hashes[30] = leaf_hash(b"rewritten")
    forged = MemoryTree(hashes)
    proof = forged.consistency_proof(60, 100)
    assert not verify_consistency(60, 100, old_root, forged.root(), proof)
    # And a tree that dropped a record before the checkpoint cannot prove it either.
    dropped = MemoryTree(hashes[:30] + hashes[31:])
    assert not verify_consistency(60, 99, old_root, dropped.root(), dropped.consistency_proof(60))


# --- the incremental frontier and the subtree callback ---


def test_frontier_root_equals_full_root_at_every_size():
    rng = random.Random(300)
    hashes = [leaf_hash(rng.randbytes(8)) for _ in range(300)]
    frontier = Frontier()
    assert frontier.root() == EMPTY_ROOT
    for size, h in enumerate(hashes, start=1):
        frontier.append(h)
        assert frontier.size == size
        assert frontier.root() == root(hashes[:size])
        assert len(frontier.hashes) == size.bit_count()
    # Extending in chunks of any length gives the same frontier as one leaf at a time.
    chunked, size = Frontier(), 0
    while size < len(hashes):
        k = rng.randrange(0, 40)
        chunked.extend(hashes[size : size + k])
        size = min(size + k, len(hashes))
        assert chunked == Frontier.of(hashes[:size])


def test_frontier_survives_its_stored_forms():
    rng = random.Random(5)
    for size in [0, 1, 2, 3, 7, 8, 255, 1000]:
        frontier = Frontier.of(leaf_hash(rng.randbytes(4)) for _ in range(size))
        again, problem = Frontier.decode(frontier.to_bytes())
        assert problem is None and again == frontier and again.root() == frontier.root()
        stored = json.loads(json.dumps(frontier.to_json()))
        again, problem = Frontier.from_json(stored)
        assert problem is None and again == frontier
        # A restored frontier keeps growing like the original.
        more = [leaf_hash(rng.randbytes(4)) for _ in range(5)]
        again.extend(more)
        frontier.extend(more)
        assert again == frontier


def test_a_malformed_stored_frontier_is_a_problem_not_a_frontier():
    good = Frontier.of(LEAF_HASHES[:5]).to_bytes()  # 5 leaves: two hashes
    for bad in [b"", good[:7], good[:-1], good + b"\x00" * 32, (7).to_bytes(8, "big") + good[8:]]:
        frontier, problem = Frontier.decode(bad)
        assert frontier is None and problem
    good_json = Frontier.of(LEAF_HASHES[:5]).to_json()
    bad_jsons = [
        None,
        [],
        {"size": 5},
        {**good_json, "extra": 1},
        {**good_json, "size": -1},
        {**good_json, "size": True},
        {**good_json, "size": 4},
        {**good_json, "hashes": ["zz" * 32, good_json["hashes"][1]]},
        {**good_json, "hashes": [good_json["hashes"][0][:-2], good_json["hashes"][1]]},
    ]
    for bad in bad_jsons:
        frontier, problem = Frontier.from_json(bad)
        assert frontier is None and problem, bad


def test_the_callback_is_asked_only_for_few_perfect_aligned_subtrees():
    tree = random_tree(random.Random(1), 1000)
    asked: list[tuple[int, int]] = []

    def subtree_hash(start: int, end: int) -> bytes:
        asked.append((start, end))
        return tree.subtree_hash(start, end)  # raises on anything not perfect and aligned

    for index in [0, 1, 511, 512, 999]:
        asked.clear()
        assert inclusion_proof(index, 1000, subtree_hash) == tree.inclusion_proof(index)
        assert len(asked) <= 2 * 10
    for old in [1, 3, 500, 512, 999]:
        asked.clear()
        assert consistency_proof(old, 1000, subtree_hash) == tree.consistency_proof(old)
        assert len(asked) <= 3 * 10
    asked.clear()
    assert root_at(1000, subtree_hash) == tree.root()
    assert len(asked) == (1000).bit_count()


def test_subtrees_from_leaf_hashes_give_the_same_proofs():
    rng = random.Random(2)
    hashes = [leaf_hash(rng.randbytes(16)) for _ in range(77)]
    from_leaves = subtree_hash_from_leaves(lambda start, end: hashes[start:end])
    tree = MemoryTree(hashes)
    for index in range(77):
        assert inclusion_proof(index, 77, from_leaves) == tree.inclusion_proof(index)
    assert consistency_proof(13, 77, from_leaves) == tree.consistency_proof(13)
    short = subtree_hash_from_leaves(lambda start, end: hashes[start : end - 1])
    with pytest.raises(ValueError, match="asked for leaves"):
        inclusion_proof(0, 77, short)


def test_impossible_requests_are_refused():
    tree = MemoryTree(LEAF_HASHES)
    for index, size in [(0, 0), (8, 8), (-1, 8)]:
        with pytest.raises(ValueError):
            inclusion_proof(index, size, tree.subtree_hash)
    with pytest.raises(ValueError):
        consistency_proof(5, 4, tree.subtree_hash)
    with pytest.raises(ValueError):
        tree.root(9)
    with pytest.raises(ValueError):
        tree.subtree_hash(1, 3)  # not aligned
    with pytest.raises(ValueError):
        tree.subtree_hash(0, 3)  # not a power of two
    with pytest.raises(ValueError):
        Frontier().append(b"short")
    with pytest.raises(ValueError):
        root_at(-1, tree.subtree_hash)


def test_the_module_imports_nothing_from_the_project():
    # The tree is the part an auditor reimplements: it must stand alone.
    source = Path(merkle.__file__).read_text(encoding="utf-8")
    assert "from recorder" not in source and "import recorder" not in source
