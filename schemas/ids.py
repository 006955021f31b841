"""Flink's identifiers as field types, so every event spells and documents them the same way.

All are strings on the wire (Flink prints its 16-byte ids as 32 hex digits; any unique string
works here).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .model import Int32

JobID = Annotated[str, Field(description="JobID of the job.")]
ResourceID = Annotated[str, Field(description="ResourceID of the TaskExecutor.")]
AllocationID = Annotated[str, Field(description="AllocationID of the slot allocation.")]
SlotIndex = Annotated[Int32, Field(description="Index of the slot in its TaskExecutor's table.")]
ExecutionAttemptID = Annotated[str, Field(description="ExecutionAttemptID of the attempt.")]
SlotRequestId = Annotated[str, Field(description="SlotRequestId of the SlotPool's request.")]
InstanceID = Annotated[
    str | None,
    Field(
        description="InstanceID of one run of the TaskExecutor's process: new at every start, "
        "so what an earlier run wrote is told apart from what this one writes (null: written "
        "before instances were told apart)."
    ),
]
JobMasterFencingToken = Annotated[
    str | None, Field(description="JobMasterId the sender addresses; stale ones are rejected.")
]
