"""Run directories: the name of every file of a run, creating one (nothing of an earlier run touched), reading
one back, and the validated model of what dlaunch writes there."""
