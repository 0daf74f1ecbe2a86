"""Spark SQL's hash functions of int32 ids, in numpy: code outside a Spark job that must choose the rows a Spark
expression would choose (plain numpy, no Spark; each checked against Spark in the tests named below).

* :func:`xxhash64`: ``xxhash64(qid)`` (``XXH64.hashInt(qid, 42)``), which picks the histogram cuts' sample
  (:mod:`pipelines.store.cuts`; tests/execution/test_train.py).
* :func:`murmur3` and :func:`partition`: ``hash(qid)`` (``Murmur3_x86_32.hashInt(qid, 42)``) and the partition
  ``repartition(workers, qid)`` puts a row in, which picks a training worker's queries
  (:mod:`pipelines.worker.rows`; tests/worker/test_rows.py).
"""

from __future__ import annotations

import numpy as np

#: The seed of Spark SQL's ``hash`` and ``xxhash64`` functions and of its hash partitioning.
SEED = 42

#: xxHash64's primes (Spark's ``XXH64``).
_P1, _P2, _P3, _P5 = (
    np.uint64(0x9E3779B185EBCA87),
    np.uint64(0xC2B2AE3D27D4EB4F),
    np.uint64(0x165667B19E3779F9),
    np.uint64(0x27D4EB2F165667C5),
)
#: Murmur3's (x86, 32 bits) constants.
_C1, _C2 = np.uint32(0xCC9E2D51), np.uint32(0x1B873593)


def xxhash64(ids: np.ndarray) -> np.ndarray:
    """Spark SQL's ``xxhash64`` of int32 ids, as uint64 (``.view(np.int64)``: Spark's signed long)."""
    with np.errstate(over="ignore"):  # 64-bit arithmetic wraps, as Java's long does
        x = ids.astype(np.int64).astype(np.uint64) & np.uint64(0xFFFFFFFF)  # the int's 32 bits, unsigned
        h = np.uint64((SEED + int(_P5) + 4) % (1 << 64)) ^ (x * _P1)
        h = ((h << np.uint64(23)) | (h >> np.uint64(41))) * _P2 + _P3
        h ^= h >> np.uint64(33)
        h *= _P2
        h ^= h >> np.uint64(29)
        h *= _P3
        h ^= h >> np.uint64(32)
    return h


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def murmur3(ids: np.ndarray) -> np.ndarray:
    """Spark SQL's ``hash`` of int32 ids, as int32."""
    with np.errstate(over="ignore"):  # 32-bit arithmetic wraps, as Java's int does
        k = np.ascontiguousarray(ids, np.int32).view(np.uint32) * _C1
        k = _rotl(k, 15) * _C2
        h = _rotl(np.uint32(SEED) ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
        h ^= np.uint32(4)  # the input's length in bytes
        h ^= h >> np.uint32(16)
        h *= np.uint32(0x85EBCA6B)
        h ^= h >> np.uint32(13)
        h *= np.uint32(0xC2B2AE35)
        h ^= h >> np.uint32(16)
    return h.view(np.int32)


def partition(ids: np.ndarray, n: int) -> np.ndarray:
    """The partition ``repartition(n, col)`` puts each row in: ``pmod(hash(col), n)``."""
    return murmur3(ids).astype(np.int64) % n
