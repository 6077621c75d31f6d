"""Everything decided before anything starts: this host's share of the job, its settings, the plan (one
``RankSpec`` per local rank), its description for ``--dry-run`` and every rank's environment. Pure: nothing
here starts a process."""
