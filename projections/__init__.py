"""Read models built from the log: replay (state as of a point of the log, verification of the
recorded decisions) and the exported log file."""
