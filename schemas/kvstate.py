"""Queryable state: KvState instances registered at the job's KvStateLocationRegistry."""

from __future__ import annotations

from pydantic import Field

from .ids import JobID, JobMasterFencingToken
from .model import Event, Int32
from .topics import TopicRole
from .types import KeyGroupRange

_RUNNER = "the task runner (Spark) for keyed state"


class KvStateRegistered(Event):
    """A task registered a KvState instance for a key group range of a vertex."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = _RUNNER

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    job_vertex_id: str = Field(description="JobVertexID of the registering operator.")
    key_group_range: KeyGroupRange = Field(description="Key groups the instance holds.")
    registration_name: str = Field(description="Name the state is queried by.")
    kv_state_id: str = Field(description="KvStateID of the instance.")
    server_host: str = Field(description="Host of the KvState server answering queries.")
    server_port: Int32 = Field(description="Port of that server.")


class KvStateUnregistered(Event):
    """A task unregistered a KvState instance for a key group range."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = _RUNNER

    job_id: JobID
    job_master_id: JobMasterFencingToken = None
    job_vertex_id: str = Field(description="JobVertexID of the operator.")
    key_group_range: KeyGroupRange = Field(description="Key groups unregistered.")
    registration_name: str = Field(description="Name of the state.")


class KvStateRegistrationRejected(Event):
    """The KvStateLocationRegistry refused a (un)registration: unknown job or vertex, a name
    owned by another operator, a key group range out of bounds."""

    topic_role = TopicRole.JOB
    key_field = "job_id"
    produced_by = "the JobMaster's KvStateLocationRegistry"

    job_id: JobID
    job_vertex_id: str = Field(description="JobVertexID named by the refused event.")
    registration_name: str = Field(description="Name of the state.")
    reason: str = Field(description="Why.")
