"""What a run leaves: the record (its schema sections: path, headroom, accuracy), where it ran (provenance, the
path fingerprint), how it is delivered (--output, the table, --json) and the side outputs (MLLOG lines, TensorBoard
events, progress)."""
