"""Reading a run directory: status, logs, the report page, checkpoints, pruning."""
