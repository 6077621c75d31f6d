"""What a user says: one ``Option`` per flag (parsers, ``DLAUNCH_*`` variables, YAML files and generated
scripts are built from it), the number types, ``--env``/``--env-file``, and the typed ``LaunchRequest``."""
