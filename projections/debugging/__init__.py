"""Debugging read models: why a slot waits, what changed between two points, a job's story
and failovers, explained for people at a terminal."""
