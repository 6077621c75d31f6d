"""Rank tables: the model (parse, dump), HCCL's rules, building and merging tables, this host's share."""
