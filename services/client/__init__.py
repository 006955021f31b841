"""Client-side writers: code that runs in a client's process (the CLI's `job submit`,
`produce`) and writes events onto the control topics, as Flink's client and Dispatcher do."""
