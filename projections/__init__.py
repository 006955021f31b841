"""Read models built from the log (replay, timelines, REST views); they arrive with the runtime."""
