"""Key groups exactly as Flink computes them (KeyGroupRangeAssignment, KeyGroupRange).

A keyed operator's state is split into `max_parallelism` key groups; a key belongs to the key
group `murmurHash(key.hashCode()) % maxParallelism` and a key group to the operator index
`kg * parallelism / maxParallelism`. Keys hash with Java's `hashCode` so that a key lands in
the same key group here as in Flink.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobledger.schemas import types

DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7
UPPER_BOUND_MAX_PARALLELISM = 1 << 15

_MASK = 0xFFFFFFFF


def _int32(value: int) -> int:
    value &= _MASK
    return value - (1 << 32) if value & 0x80000000 else value


def _rotl(value: int, distance: int) -> int:
    value &= _MASK
    return ((value << distance) | (value >> (32 - distance))) & _MASK


def murmur_hash(code: int) -> int:
    """Flink's MathUtils.murmurHash(int): one murmur3 round plus fmix32, made non-negative."""
    h = (code * 0xCC9E2D51) & _MASK
    h = _rotl(h, 15)
    h = (h * 0x1B873593) & _MASK
    h = _rotl(h, 13)
    h = (h * 5 + 0xE6546B64) & _MASK
    h ^= 4
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    signed = _int32(h)
    if signed >= 0:
        return signed
    return -signed if signed != -(2**31) else 0


def java_hash_code(key: object) -> int:
    """`key.hashCode()` as the JVM computes it, for the key types jobledger passes to Flink:
    String (UTF-16 code units), Integer, Long and Boolean."""
    if isinstance(key, bool):
        return 1231 if key else 1237
    if isinstance(key, int):
        if -(2**31) <= key < 2**31:
            return key
        if -(2**63) <= key < 2**63:
            return _int32(key ^ ((key & 0xFFFFFFFFFFFFFFFF) >> 32))
        raise ValueError(f"{key} is neither a Java int nor a Java long")
    if isinstance(key, str):
        h = 0
        units = key.encode("utf-16-be")
        for i in range(0, len(units), 2):
            h = (31 * h + int.from_bytes(units[i : i + 2], "big")) & _MASK
        return _int32(h)
    raise TypeError(f"no Java hashCode for keys of type {type(key).__name__}")


def _check_max_parallelism(max_parallelism: int) -> None:
    if not 0 < max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(
            f"max parallelism must be in 1..{UPPER_BOUND_MAX_PARALLELISM}, not {max_parallelism}"
        )


def compute_key_group_for_key_hash(key_hash: int, max_parallelism: int) -> int:
    return murmur_hash(key_hash) % max_parallelism


def assign_to_key_group(key: object, max_parallelism: int) -> int:
    if key is None:
        raise ValueError("Assigned key must not be null!")
    return compute_key_group_for_key_hash(java_hash_code(key), max_parallelism)


def compute_operator_index_for_key_group(
    max_parallelism: int, parallelism: int, key_group: int
) -> int:
    return key_group * parallelism // max_parallelism


def assign_key_to_parallel_operator(key: object, max_parallelism: int, parallelism: int) -> int:
    return compute_operator_index_for_key_group(
        max_parallelism, parallelism, assign_to_key_group(key, max_parallelism)
    )


@dataclass(frozen=True)
class KeyGroupRange:
    """An inclusive range of key groups; `of(s, e)` with s > e is the empty range (KG-7).

    Flink's KeyGroupRange, the one the reducers and the runner compute with. The event
    catalog's record of the same name (`schemas.types.KeyGroupRange`) is only its wire form:
    events carry that, and code crosses between the two with `to_record` / `from_record`
    alone (a layer test holds that nothing else in the engine imports the record).
    """

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 0 or (self.start > self.end and (self.start, self.end) != (0, -1)):
            raise ValueError(f"invalid key group range [{self.start}, {self.end}]")

    @classmethod
    def of(cls, start: int, end: int) -> KeyGroupRange:
        return cls(start, end) if start <= end else EMPTY_KEY_GROUP_RANGE

    def __len__(self) -> int:
        return 1 + self.end - self.start

    def __iter__(self):
        return iter(range(self.start, self.end + 1))

    def contains(self, key_group: int) -> bool:
        return self.start <= key_group <= self.end

    def intersection(self, other: KeyGroupRange) -> KeyGroupRange:
        return KeyGroupRange.of(max(self.start, other.start), min(self.end, other.end))

    @classmethod
    def from_record(cls, record: types.KeyGroupRange) -> KeyGroupRange:
        """The range an event carries; ValueError if it is no range."""
        return cls(record.start_key_group, record.end_key_group)

    def to_record(self) -> types.KeyGroupRange:
        return types.KeyGroupRange(start_key_group=self.start, end_key_group=self.end)


EMPTY_KEY_GROUP_RANGE = KeyGroupRange(0, -1)


def compute_key_group_range_for_operator_index(
    max_parallelism: int, parallelism: int, operator_index: int
) -> KeyGroupRange:
    """The key groups operator `operator_index` of `parallelism` owns (KG-5)."""
    _check_max_parallelism(max_parallelism)
    if not 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"parallelism must be in 1..{UPPER_BOUND_MAX_PARALLELISM}")
    if max_parallelism < parallelism:
        raise ValueError("max parallelism must not be smaller than parallelism")
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def _round_up_to_power_of_two(x: int) -> int:
    return 1 << (x - 1).bit_length() if x > 1 else 1


def compute_default_max_parallelism(parallelism: int) -> int:
    """min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768) (KG-6)."""
    if not 0 < parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        raise ValueError(f"parallelism must be in 1..{UPPER_BOUND_MAX_PARALLELISM}")
    rounded = _round_up_to_power_of_two(parallelism + parallelism // 2)
    return min(max(rounded, DEFAULT_LOWER_BOUND_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)
