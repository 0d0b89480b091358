"""Shared helpers for the unit tests under tests/proxy.

``tests/`` goes on ``sys.path`` so that test modules can ``from schemas import validate``
(the OpenAPI helper shared with the end-to-end tests).
"""

import sys
from pathlib import Path

_TESTS_DIR = str(Path(__file__).resolve().parents[1])
if _TESTS_DIR not in sys.path:
    sys.path.insert(0, _TESTS_DIR)
