"""The engine: the reducers (Flink's control plane), the service runtime that hosts them on
Kafka, the Spark task runner, and the Kafka I/O they share."""
