"""Reducers (pure), the service runtime (Kafka I/O) and the `jobledger` command line."""
