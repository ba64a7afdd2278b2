"""`make bench`: every benchmark script, one after the other (figures → docs/PERFORMANCE.md).

python -m tests.bench            # both
python -m tests.bench config     # only the runtime config endpoint
python -m tests.bench traces     # only trace ingest and lookup
"""

from __future__ import annotations

import subprocess
import sys

BENCHES = {"config": "tests.bench.bench_config", "traces": "tests.bench.bench_traces"}


def main() -> int:
    chosen = sys.argv[1:] or list(BENCHES)
    unknown = [name for name in chosen if name not in BENCHES]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHES)}")
        return 2
    status = 0
    for name in chosen:
        print(f"\n=== {name} ===", flush=True)
        status |= subprocess.call([sys.executable, "-m", BENCHES[name]])
    return status


if __name__ == "__main__":
    sys.exit(main())
