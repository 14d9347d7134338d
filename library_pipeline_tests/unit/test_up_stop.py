"""A SIGTERM that lands while Python runs a garbage-collection callback: the
handler's exception is dropped by the interpreter, so `library up` records the
stop for its serving loop and keeps the dropped exception off stderr."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap


def test_a_stop_dropped_inside_a_finalizer_is_recorded_without_a_traceback():
    script = textwrap.dedent("""
        import os, signal, sys
        from library_pipeline.cli import up

        up._install_stop_handlers()
        sys.unraisablehook = up._quiet_dropped_stop(sys.unraisablehook)

        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                sum(range(10_000))  # the handler runs here, inside the finalizer

        thing = Finalized()
        del thing
        print("requested", up._requested)

        class Failing:
            def __del__(self):
                raise ValueError("an ordinary dropped error")

        thing = Failing()
        del thing
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert done.returncode == 0, done.stderr
    assert "requested ['SIGTERM']" in done.stdout
    assert "_Stop" not in done.stderr
    # other dropped exceptions still reach the previous hook
    assert "ValueError: an ordinary dropped error" in done.stderr
