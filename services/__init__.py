"""The engine, one room per kind: `control/` (the pure reducers), `host/` (the Kafka services
that run them), `runner/` (Spark tasks), `client/` (writers in a client's process),
`local/` (a laptop's broker and Spark cluster); `kafka.py` and `configuration.py` are what
the rooms share."""
