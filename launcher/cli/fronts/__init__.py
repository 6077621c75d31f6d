"""Fronts that take another launcher's command line (torchrun's, msrun's) and settle it into dlaunch's request."""
