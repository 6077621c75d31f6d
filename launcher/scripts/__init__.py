"""``dlaunch script``: standalone launch scripts (run.sh, run_cluster.sh, Slurm) rendered from the templates
beside it."""
