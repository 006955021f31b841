"""Read models built from the log, one room per kind: `log/` (reading and replaying the log),
`rest/` (Flink's REST API and dashboard), `debugging/` (answers for people at a terminal)."""
