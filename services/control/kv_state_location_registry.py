"""KvStateLocationRegistry: where each registered KvState of a job lives, per key group
(Flink's KvStateLocationRegistry and KvStateLocation, seed 000).

Invariants:
- a registration name belongs to exactly one JobVertex (the first to register it);
- a location has one slot per key group of its vertex (its max parallelism), each holding
  the KvStateID and server address of the instance owning that key group, or nothing;
- a location exists only while at least one of its key groups is registered;
- every refusal is atomic: a rejected (un)registration changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .key_groups import UPPER_BOUND_MAX_PARALLELISM, KeyGroupRange, assign_to_key_group
from .reducer import runs


@dataclass(frozen=True)
class KvStateRegistration:
    kv_state_id: str
    server_host: str
    server_port: int


@dataclass
class KvStateLocation:
    job_id: str
    job_vertex_id: str
    num_key_groups: int
    registration_name: str
    key_groups: list[KvStateRegistration | None] = runs(
        at_most=UPPER_BOUND_MAX_PARALLELISM, default_factory=list
    )

    def __post_init__(self) -> None:
        if not self.key_groups:
            self.key_groups = [None] * self.num_key_groups

    @property
    def num_registered_key_groups(self) -> int:
        return sum(1 for kg in self.key_groups if kg is not None)

    def _bounds_refusal(self, key_groups: KeyGroupRange) -> str | None:
        if key_groups.start < 0 or key_groups.end >= self.num_key_groups:
            return (
                f"Key group index: range [{key_groups.start}, {key_groups.end}] is outside "
                f"0..{self.num_key_groups - 1} of vertex {self.job_vertex_id}"
            )
        return None

    def register(self, key_groups: KeyGroupRange, registration: KvStateRegistration) -> str | None:
        """(Over)write every key group of the range (KV-10, KV-15); None when done."""
        refusal = self._bounds_refusal(key_groups)
        if refusal is None:
            for kg in key_groups:
                self.key_groups[kg] = registration
        return refusal

    def unregister(self, key_groups: KeyGroupRange) -> str | None:
        """Clear the range, all or nothing (KV-8, KV-11 made atomic)."""
        refusal = self._bounds_refusal(key_groups)
        if refusal is None and any(self.key_groups[kg] is None for kg in key_groups):
            refusal = "Not registered. Probably registration/unregistration race."
        if refusal is None:
            for kg in key_groups:
                self.key_groups[kg] = None
        return refusal

    def lookup(self, key_group: int) -> KvStateRegistration | None:
        if not 0 <= key_group < self.num_key_groups:
            raise IndexOutOfRange(f"key group {key_group} outside 0..{self.num_key_groups - 1}")
        return self.key_groups[key_group]


class IndexOutOfRange(IndexError):
    """A key group outside the location's vertex (KV-12)."""


@dataclass(frozen=True)
class RegistryRefusal:
    """Why the registry refused; `fail_vertex` when that vertex must fail without restarts."""

    reason: str
    fail_vertex: bool = False


@dataclass
class KvStateLocationRegistry:
    """One per job; knows the job's vertices and their max parallelism."""

    job_id: str
    max_parallelism_of: dict[str, int]
    locations: dict[str, KvStateLocation] = field(default_factory=dict)

    def notify_registered(
        self,
        job_vertex_id: str,
        key_groups: KeyGroupRange,
        registration_name: str,
        registration: KvStateRegistration,
    ) -> RegistryRefusal | None:
        location = self.locations.get(registration_name)
        if location is not None and location.job_vertex_id != job_vertex_id:
            known = job_vertex_id in self.max_parallelism_of
            return RegistryRefusal(
                f"Registration name clash. KvState with name '{registration_name}' has already "
                f"been registered by another operator ({location.job_vertex_id}).",
                fail_vertex=known,
            )
        if job_vertex_id not in self.max_parallelism_of:
            return RegistryRefusal(f"Unknown JobVertexID {job_vertex_id}")
        if location is None:
            location = KvStateLocation(
                self.job_id, job_vertex_id, self.max_parallelism_of[job_vertex_id],
                registration_name,
            )  # fmt: skip
            refusal = location.register(key_groups, registration)
            if refusal is None:
                self.locations[registration_name] = location
        else:
            refusal = location.register(key_groups, registration)
        return RegistryRefusal(refusal) if refusal else None

    def notify_unregistered(
        self, job_vertex_id: str, key_groups: KeyGroupRange, registration_name: str
    ) -> RegistryRefusal | None:
        location = self.locations.get(registration_name)
        if location is None:
            return RegistryRefusal(
                f"Unknown registration name '{registration_name}'. "
                "Probably registration/unregistration race."
            )
        if location.job_vertex_id != job_vertex_id:
            return RegistryRefusal(
                f"Another operator ({location.job_vertex_id}) registered the KvState under "
                f"'{registration_name}'."
            )
        refusal = location.unregister(key_groups)
        if refusal is not None:
            return RegistryRefusal(refusal)
        if location.num_registered_key_groups == 0:
            del self.locations[registration_name]
        return None

    def lookup(self, registration_name: str, key: object) -> KvStateRegistration | None:
        """Which instance answers for `key` of the named state, if any (queryable state)."""
        location = self.locations.get(registration_name)
        if location is None:
            return None
        return location.lookup(assign_to_key_group(key, location.num_key_groups))

    def to_dict(self) -> dict[str, Any]:
        return {
            name: {
                "job_vertex_id": loc.job_vertex_id,
                "num_key_groups": loc.num_key_groups,
                "registered_key_groups": loc.num_registered_key_groups,
                "instances": sorted({
                    (r.kv_state_id, r.server_host, r.server_port)
                    for r in loc.key_groups if r is not None
                }),
            }
            for name, loc in self.locations.items()
        }  # fmt: skip
