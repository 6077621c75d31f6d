"""Carrying out a plan: local processes and their lifetime, the console, hangs, attempts; --ssh."""
