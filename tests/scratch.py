"""Temporary directories for the Python tests: removed when the test passes,
kept (and their path printed on stderr) when it fails.

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import scratch
    tmp = scratch.mkdtemp(prefix="qac-ft-")

The directories are removed by an atexit handler when the process ends. An
atexit handler cannot see the exit status, so the outcome is recorded while
the process ends:

- an uncaught exception (an AssertionError, a RuntimeError, ...) goes through
  sys.excepthook, which is wrapped to record the failure;
- sys.exit(code) is wrapped to record the code: None, 0 and 77 (skipped, as
  CTest is told) count as success, anything else (1, a message) as failure.

A `raise SystemExit(...)` statement passes by both, so a test using this
module ends through sys.exit() or an exception, or calls mark_failed()
(tests/python/conftest.py does, for pytest's failed tests). QAC_KEEP_TMP=1 keeps the
directories always. A process that is killed (a CTest timeout) runs no
atexit handler: its directories stay. Failing to remove a directory (a
server still writing into it) prints a warning and leaves the exit status
as it was.
"""
import atexit
import os
import shutil
import sys
import tempfile

_dirs = []
_failed = False
_owner = None  # the pid that made the directories (a forked child leaves them alone)


def _excepthook(tp, value, tb):
    global _failed
    _failed = True
    _saved_excepthook(tp, value, tb)


def _exit(code=None):
    global _failed
    if code not in (None, 0, 77):
        _failed = True
    _saved_exit(code)


def _cleanup():
    if os.getpid() != _owner:
        return
    keep = _failed or os.environ.get("QAC_KEEP_TMP") == "1"
    for d in _dirs:
        if keep:
            print(f"kept for inspection: {d}", file=sys.stderr)
            continue
        try:
            shutil.rmtree(d)
        except OSError as e:
            print(f"warning: could not remove {d}: {e}", file=sys.stderr)


def mark_failed():
    """Record a failure that neither hook sees (pytest catches test failures itself)."""
    global _failed
    _failed = True


def mkdtemp(prefix):
    """tempfile.mkdtemp(prefix=prefix), removed at exit unless the test failed."""
    global _owner, _saved_excepthook, _saved_exit
    if _owner is None:
        _owner = os.getpid()
        _saved_excepthook, sys.excepthook = sys.excepthook, _excepthook
        _saved_exit, sys.exit = sys.exit, _exit
        atexit.register(_cleanup)
    d = tempfile.mkdtemp(prefix=prefix)
    _dirs.append(d)
    return d
