"""The partition host: runs the control plane's reducers as Kafka services, one consumer
group, one transaction per batch of a partition's inputs, rebuilt from snapshots and the log."""
