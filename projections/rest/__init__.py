"""The REST surface: Flink's REST API and dashboard over the log (WebMonitorEndpoint, its
messages, and the read models its answers are built from)."""
