"""Writes this rank's environment to ./env_<RANK>.json (the launch directory): works under any launcher."""

import json
import os

with open(f"env_{os.environ['RANK']}.json", "w") as fh:
    json.dump(dict(os.environ), fh, indent=1, sort_keys=True)
