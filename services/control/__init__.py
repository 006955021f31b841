"""Flink's control plane as pure reducers: JobMaster, Scheduler, SlotPool, ResourceManager,
TaskExecutor, KvState registry and what they are built from. Nothing here reads a clock, a
socket or a random number (tests/system/test_layers.py holds it): the same log gives the same
decisions in a service, in replay and in a test."""
