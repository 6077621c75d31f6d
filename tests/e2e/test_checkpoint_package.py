"""The training side as one package: users' import paths keep working, and the launcher does not load it.

``launcher/checkpoint/`` re-exports its API lazily (PEP 562): the launcher imports ``names`` and ``resume``
at every start, and importing a submodule runs the package's ``__init__`` first. Each check runs in a
fresh interpreter, whose ``sys.modules`` is the evidence.
"""

import subprocess
import sys
import textwrap

from tests.launching import dlaunch_env


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=dlaunch_env(), timeout=60)


def test_every_user_import_path_works_and_names_one_function():
    result = _python("""
        import launcher.checkpoint as ckpt
        from launcher import checkpoint, heartbeat
        from launcher.checkpoint import save, saving_on_exception
        from launcher.checkpoint import *  # noqa: F403
        from launcher.checkpoint import api
        from launcher.checkpoint import heartbeat as inner
        assert ckpt is checkpoint and save is checkpoint.save is api.save and load is api.load
        assert saving_on_exception is api.saving_on_exception
        assert all(getattr(checkpoint, name) is getattr(api, name) for name in checkpoint.__all__)
        assert heartbeat.beat is inner.beat   # one once-a-second limit, whichever path a script uses
        assert set(checkpoint.__all__) <= set(dir(checkpoint))
        try:
            checkpoint._save
        except AttributeError:
            pass
        else:
            raise SystemExit("a private name of api reached through the package")
        import sys
        assert "torch" not in sys.modules
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stderr


def test_the_launcher_does_not_load_the_training_api():
    # what every launch imports reaches names and resume, never the writer's threads and signal guards
    result = _python("""
        import sys
        import launcher.cli.run, launcher.cli.cluster, launcher.execute.attempts, launcher.observe.status  # noqa: E401
        print(" ".join(sorted(m for m in sys.modules if m.startswith("launcher.checkpoint"))))
    """)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["launcher.checkpoint", "launcher.checkpoint.names", "launcher.checkpoint.resume"]
