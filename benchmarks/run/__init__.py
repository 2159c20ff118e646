"""One run, as bench carries it out: the supervisor (a worker process, its stop, the record when the worker writes
none), the worker, the measurements (throughput, time to accuracy) with the bare reference loop and the batch
search beside them, and what a stopped run of several ranks keeps (rank_steps)."""
