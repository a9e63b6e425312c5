"""The tests' and benchmarks' PostgreSQL + pgvector: the server of
scripts/pg_local.py (one implementation, the one users start by hand)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from pg_local import Server, free_port, pginstall  # noqa: E402,F401
