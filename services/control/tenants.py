"""Tenants: who a job counts against, the limits each is held to, and the rate they submit at.

A tenant is a principal: the one a `JobSubmitted` names, which a secured cluster holds to the
record's signer (`authorizer`), and which on an unsigned cluster is the client's own word
(`job submit --principal`, or none: ANONYMOUS). Only the ResourceManager sees every job's
slot requests, so it is the one reducer that can count a tenant's jobs and slots across the
job partitions; each request carries its job's principal to it (`SlotRequested.principal`).

Rates are judged on event time, as everything in the reducers: against the latest event time
of any slot request the ResourceManager has read, never an input's own, so a flood dated in
the past spends its tenant's allowance as one dated now does.
"""

from __future__ import annotations

from dataclasses import dataclass

from .event_time import saturated

ANONYMOUS = "anonymous"
"""The tenant of every job whose submission names no principal (every job of a log written
before principals were recorded: one tenant, so such logs are served first come, first
served, as they were)."""

MAX_PRINCIPAL_CHARS = 256
"""The longest principal a JobSubmitted may name: it is kept with every open slot request."""


def tenant_of(principal: str | None) -> str:
    return ANONYMOUS if principal is None else principal


def principal_refusal(principal: str | None) -> str | None:
    """Why a JobSubmitted may not name `principal`, or None."""
    if principal is not None and not 0 < len(principal) <= MAX_PRINCIPAL_CHARS:
        return f"principal is {len(principal)} characters, not 1 to {MAX_PRINCIPAL_CHARS}"
    return None


@dataclass(frozen=True)
class TenantLimits:
    """What one tenant may hold at the ResourceManager (`jobledger.principal.*`; 0: no limit).

    A job is in flight from its first open slot request until it holds and awaits no slot;
    the job that would be one too many, or come too soon after the tenant's last ones, has
    its slot requests refused (`SlotRequestRefused`) and fails with that reason. Slots beyond
    `max_slots` are not refused: the tenant's requests wait for its own slots to free up,
    while other tenants' are served (YARN's maxResources does the same)."""

    max_jobs_in_flight: int = 1_000
    max_submissions_per_second: int = 500
    """Temporal Cloud's default per namespace; a tenant may submit one second's worth at once."""
    max_slots: int = 0

    def admission_refusal(
        self, tenant: str, in_flight: int, theoretical_arrival: int, now: int
    ) -> str | None:
        """Why a new job of `tenant` may not start, with `in_flight` jobs of its own and its
        rate's `theoretical_arrival` (`next_arrival`) at event time `now`; None: it may."""
        if self.max_jobs_in_flight and in_flight >= self.max_jobs_in_flight:
            return (
                f"principal {tenant!r} has {in_flight} jobs in flight, the limit "
                f"(jobledger.principal.max-jobs-in-flight={self.max_jobs_in_flight})"
            )
        rate = self.max_submissions_per_second
        if rate and theoretical_arrival - now * rate > (rate - 1) * 1_000:
            return (
                f"principal {tenant!r} submits faster than its limit "
                f"(jobledger.principal.max-submissions-per-second={rate})"
            )
        return None

    def next_arrival(self, theoretical_arrival: int, now: int) -> int:
        """A tenant's rate after one more job at event time `now` (the generic cell rate
        algorithm, a token bucket without floats): its theoretical arrival time, in
        milliseconds times the rate, advances a second's worth per job, from no earlier than
        now; a job is refused while it lies more than a burst ahead of now. Held to the Avro
        long's range, as snapshots keep it: at the top of time every job is admitted."""
        rate = self.max_submissions_per_second
        return saturated(max(theoretical_arrival, now * rate) + 1_000)

    def rested(self, theoretical_arrival: int, now: int) -> bool:
        """Whether a tenant's rate has caught up with `now`: its state can be forgotten."""
        return theoretical_arrival <= now * self.max_submissions_per_second

    def at_slot_limit(self, held: int) -> bool:
        return bool(self.max_slots) and held >= self.max_slots
