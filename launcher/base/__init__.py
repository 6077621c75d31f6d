"""Helpers with no dlaunch concept in them: the console, lines, atomic files, JSON text, number lists, the
files a user names, signal names. Every other package may import them; they import nothing of dlaunch but the
error families."""
