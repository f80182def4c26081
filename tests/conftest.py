"""Configuration shared by the whole test suite.

Hypothesis runs under the ``posixlake`` profile (a deadline, a bounded number of
examples); ``HYPOTHESIS_PROFILE=thorough`` runs many more examples.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from datetime import timedelta

from hypothesis import settings

settings.register_profile("posixlake", deadline=timedelta(seconds=2), max_examples=60)
settings.register_profile("thorough", deadline=timedelta(seconds=10), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "posixlake"))

# When a Hypothesis test fails, its pytest plugin imports libcst to suggest a patch, and
# libcst uses the deprecated mypy_extensions.TypedDict: under filterwarnings=error that
# DeprecationWarning turns the failure report into an INTERNALERROR. Import it once here
# with the warning muted (a pyproject filterwarnings entry would do the same).
with warnings.catch_warnings(), contextlib.suppress(ImportError):
    warnings.simplefilter("ignore", DeprecationWarning)
    import hypothesis.extra._patching  # noqa: F401
