"""The laptop launchers: an Apache Kafka broker (one node or three) and a Spark standalone
cluster on loopback, for the demo and the tests. None of it is engine: a production
deployment points jobledger at its own Kafka and Spark instead."""
