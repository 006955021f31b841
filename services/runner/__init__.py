"""The task runner: Spark Structured Streaming runs the tasks the JobMaster deploys."""
