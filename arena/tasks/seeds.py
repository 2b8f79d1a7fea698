"""Seeds: the reasoning-gym dataset seed of each draw, and each episode's sampling seed.

Most reasoning-gym datasets build item ``idx`` from ``Random(dataset_seed + idx)``, so two
datasets whose seeds differ by 1 share all but one item. Each (spec occurrence, split)
therefore gets its own block of :data:`SEED_BLOCK` per-item seeds::

    dataset_seed = (seed % SEED_WRAP) * SESSION_STRIDE + (2 * occurrence + split) * SEED_BLOCK

with split 0 = train, 1 = held-out, and at most :data:`SEED_BLOCK` items drawn per block, so
train and held-out never share a generator seed (and no held-out question is a train task in any
spelling: :func:`arena.tasks.identity.task_identity` is checked as well). Dataset
seeds stay below 2**32 (some families seed numpy with them); session seeds wrap every
:data:`SEED_WRAP`.
"""

from __future__ import annotations

import hashlib

from arena.tasks.model import Split, TaskError

SEED_BLOCK = 100_000  # per-item generator seeds reserved for one split of one family spec
SESSION_STRIDE = 1_000_000  # room for 5 occurrences of a family x 2 splits per session seed
SEED_WRAP = 4_000  # session seeds are taken modulo this (4_000 x 1e6 < 2**32)


def dataset_seed(seed: int, split: Split, occurrence: int = 0) -> int:
    """The reasoning-gym dataset seed for one split of one family spec (see :data:`SEED_BLOCK`).

    Args:
        seed: the session seed.
        split: ``"train"`` or ``"heldout"``.
        occurrence: index of the spec among specs of the same family in the session.

    Returns:
        The first per-item seed of the (occurrence, split) block.

    Raises:
        TaskError: ``occurrence`` does not fit the session's stride (a family given more than 5 times).
    """
    block = 2 * occurrence + (0 if split == "train" else 1)
    if not 0 <= block < SESSION_STRIDE // SEED_BLOCK:
        raise TaskError(
            f"a task family may be given at most {SESSION_STRIDE // SEED_BLOCK // 2} times"
        )
    return (seed % SEED_WRAP) * SESSION_STRIDE + block * SEED_BLOCK


def max_draws(n: int) -> int:
    """How many items to try for ``n`` distinct questions before giving up: ``min(SEED_BLOCK, 10 n + 50)``."""
    return min(SEED_BLOCK, 10 * n + 50)


def episode_seed(seed: int, episode_key: str) -> int:
    """A stable per-episode sampling seed derived from the session seed and the episode key.

    Args:
        seed: the session seed.
        episode_key: any stable key (an episode key, ``"propose-r001-<task key>"``).

    Returns:
        The first 4 bytes of ``sha256(f"{seed}:{episode_key}")``, little-endian, in [0, 2**32).
    """
    return int.from_bytes(hashlib.sha256(f"{seed}:{episode_key}".encode()).digest()[:4], "little")
