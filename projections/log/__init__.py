"""Log access: the log as records (topics or an export file), points in it, its index,
replay to a point with verification, and the live log followed from the services' snapshots."""
