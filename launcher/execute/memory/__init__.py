"""The memory tier's launcher side (``checkpoint/tier.py`` says the layout): the area, persisting, the mirror."""
