"""A settable clock for tests that drive instrumentation without real time."""

from __future__ import annotations

T0 = 1_700_000_000.0  # unix seconds of every test's first event


class Clock:
    """A settable clock (unix seconds): ``clock.now += 2.5`` moves time on."""

    def __init__(self, now: float = T0):
        self.now = now

    def __call__(self) -> float:
        return self.now
