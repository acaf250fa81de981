"""What ``kvcal fleet --help`` shows, held apart from the pydantic records it comes from (a fast ``--help``).

The bounds are declared here and re-exported by :mod:`kvcal.fleet.settings`. The workload file's keys, which the
help lists, are generated from the Workload record into kvcal/cli/help_tables.py (scripts/gen_help_tables.py).
"""

from __future__ import annotations

MAX_PODS = 4096
# --jobs: worker processes. Each costs memory (kvcal.fleet.size.BYTES_PER_WORKER) and more of them than cores
# gain nothing; 256 covers the largest machines a study runs on and bounds the workers' memory to about 2.5 GiB.
MAX_JOBS = 256
WORKER_MIB = 10  # what one worker adds to the study's memory (benchmarks/fleet_workers.py, rounded up)
DEFAULT_MAX_SIMULATED_REQUESTS = 10_000_000  # about 10 minutes on one core (kvcal.fleet.size.SECONDS_PER_REQUEST)
