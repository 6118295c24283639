"""The timer workload written the way Kopf's documentation teaches.

Every Ticker (bench.khai.dev/v1) has a timer every 10 s (the first run as soon as Kopf sees the
object, the next `interval` seconds after each run ends) that writes status.ticks one higher than
the object carries. The same behaviour as examples/bench-timer (khai), so scripts/bench compares
like with like. The interval comes from BENCH_TIMER_INTERVAL (seconds), which scripts/bench sets.

Run: kopf run --standalone --all-namespaces benches/kopf/timer_operator.py
"""

import os

import kopf

INTERVAL = float(os.environ.get("BENCH_TIMER_INTERVAL", "10"))


@kopf.timer("bench.khai.dev", "v1", "tickers", interval=INTERVAL)
def tick(status, patch, **_):
    """One tick: status.ticks goes up by one."""
    patch.status["ticks"] = (status.get("ticks") or 0) + 1
