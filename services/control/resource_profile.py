"""Flink's ResourceProfile rules over the catalog's `ResourceProfile` record.

UNKNOWN and ANY are special: a slot that is ANY fits every request, an UNKNOWN request is met by
any slot that is not itself UNKNOWN (Flink 1.11/1.12 `ResourceProfile.isMatching`).
"""

from __future__ import annotations

from jobledger.schemas.types import ResourceProfile, ResourceProfileKind


def is_matching(slot: ResourceProfile, request: ResourceProfile) -> bool:
    """Whether a slot with profile `slot` can serve a request for `request` (rule SP-37).
    The kinds are compared before whole profiles: a model's `==` costs ten times as much,
    and a SPECIFIED slot equal to the request passes the comparisons below anyway."""
    if slot.kind is ResourceProfileKind.ANY:
        return True
    if slot.kind is ResourceProfileKind.UNKNOWN:
        return slot == request
    if request.kind is ResourceProfileKind.UNKNOWN:
        return True
    return (
        slot.cpu_cores >= request.cpu_cores
        and slot.task_heap_memory_mb >= request.task_heap_memory_mb
        and slot.managed_memory_mb >= request.managed_memory_mb
    )


def scale(profile: ResourceProfile, factor: int) -> ResourceProfile:
    """`factor` slots of `profile` (a TaskExecutor's whole budget)."""
    return ResourceProfile(
        kind=ResourceProfileKind.SPECIFIED,
        cpu_cores=profile.cpu_cores * factor,
        task_heap_memory_mb=profile.task_heap_memory_mb * factor,
        managed_memory_mb=profile.managed_memory_mb * factor,
    )


def fits_within(request: ResourceProfile, budget: ResourceProfile) -> bool:
    """Every resource of a specified `request` is at most what `budget` has left."""
    return (
        request.cpu_cores <= budget.cpu_cores
        and request.task_heap_memory_mb <= budget.task_heap_memory_mb
        and request.managed_memory_mb <= budget.managed_memory_mb
    )


def subtract(a: ResourceProfile, b: ResourceProfile) -> ResourceProfile:
    return ResourceProfile(
        kind=ResourceProfileKind.SPECIFIED,
        cpu_cores=a.cpu_cores - b.cpu_cores,
        task_heap_memory_mb=a.task_heap_memory_mb - b.task_heap_memory_mb,
        managed_memory_mb=a.managed_memory_mb - b.managed_memory_mb,
    )
