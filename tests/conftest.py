"""Configuration shared by the whole test suite.

Hypothesis runs under the ``posixlake`` profile (a deadline, a bounded number of
examples); ``HYPOTHESIS_PROFILE=thorough`` runs many more examples.
"""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import settings

# The deadline is generous: CI machines have 2 cores shared with Spark, servers and VMs.
settings.register_profile("posixlake", deadline=timedelta(seconds=10), max_examples=60)
settings.register_profile("thorough", deadline=timedelta(seconds=30), max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "posixlake"))
