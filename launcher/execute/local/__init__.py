"""This host's processes: spawning ranks, watching them with one selector, their console, hangs, and the reaper
that leaves nothing behind."""
