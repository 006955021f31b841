"""Read models built from the log: replay (state as of a point of the log, verification of the
recorded decisions), the exported log file, and a job's timeline."""
