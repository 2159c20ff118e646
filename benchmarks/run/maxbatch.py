"""`bench --find-max-batch`: the largest batch that fits, found by doubling then bisecting.

Each probe is a normal run (its own worker process, its own record: an OOM is a
record with status oom, classified as for any run), so a search leaves the
speed at every batch size it tried. The search is the pure `Search` below: it
sees only each probe's status, so its logic is tested without running anything.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_LIMIT = 65536  # doubling stops here: a bound, not a guess at what fits


@dataclass
class Search:
    start: int
    limit: int = DEFAULT_LIMIT
    largest_fit: int | None = None
    smallest_oom: int | None = None
    stop_reason: str | None = None
    probes: int = 0

    @property
    def phase(self) -> str:
        """`double` until a probe runs out of memory, then `bisect`."""
        return "double" if self.smallest_oom is None else "bisect"

    def next_batch(self) -> int | None:
        """The next batch size to probe, or None (stop_reason says why)."""
        if self.stop_reason is not None:
            return None
        fit, oom = self.largest_fit, self.smallest_oom
        if fit is None and oom is None:
            return self.start
        if oom is None:
            if fit >= self.limit:
                return self._stop(f"reached --max-batch-limit {self.limit} without running out of memory")
            return min(fit * 2, self.limit)
        if fit is None:
            if oom <= 1:
                return self._stop("nothing fits: batch 1 runs out of memory")
            return oom // 2
        if oom - fit <= 1:
            return self._stop(f"batch {fit} fits and {oom} runs out of memory")
        return (fit + oom) // 2

    def _stop(self, reason: str) -> None:
        """The first reason to stop is the one kept."""
        if self.stop_reason is None:
            self.stop_reason = reason
        return None

    def observe(self, batch: int, status: str) -> None:
        """A probe's outcome: ok and oom narrow the bracket; anything else ends the search."""
        self.probes += 1
        if status == "ok":
            self.largest_fit = max(batch, self.largest_fit or 0)
        elif status == "oom":
            self.smallest_oom = batch if self.smallest_oom is None else min(batch, self.smallest_oom)
        else:
            self._stop(f"the probe at batch {batch} ended {status}")

    def out_of_time(self, budget_s: float) -> None:
        self._stop(f"the --max-batch-budget of {budget_s:g} s is spent")

    def section(self, search_id: str, phase: str, budget_s: float) -> dict:
        """The record's `batch_search` section for the probe just observed."""
        final = self.next_batch() is None
        return {
            "search_id": search_id,
            "probe": self.probes,
            "phase": phase,
            "largest_fit": self.largest_fit,
            "smallest_oom": self.smallest_oom,
            "final": final,
            "max_batch": self.largest_fit if final else None,
            "stop_reason": self.stop_reason if final else None,
            "time_budget_s": budget_s,
        }
