"""What a run of several processes keeps when it is stopped (a signal, --timeout): every rank's steps timed so far.

Process 0 cannot gather them the usual way (a gather on the rendezvous, a collective) once the ranks are being
stopped: each may be blocked in a collective its peers will never join. So each rank's worker, on the stop, from a
thread of its own (processes.on_stop_in_thread), hands its steps to process 0 over the rendezvous on a connection of
its own (Rendezvous.hand_over: from any host, where /tmp is each node's own as on most clusters), or, where process 0
cannot be reached, writes them into a directory named after the run in its temp dir (steps_dir), whole or not at all,
as process 0's worker writes its own. Process 0's worker then waits for every other rank's steps, handed over (it
writes them into that directory) or written there by a rank on its host (receive); its supervisor, once that worker
has ended, reads them all (collect) and its record keeps the totals over ranks over the steps every rank completed
(kept), as an `ok` run's (totals.aggregate), or, when a rank's steps never came, names it and keeps no total rather
than a wrong one.

A run whose chief times every worker itself (--strategy ps) needs none of this: the chief has every worker's steps
and unwinds as a run of one does (Strategy.measures_alone, worker.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from ..measure.totals import aggregate, rank_rows

# How long process 0's worker waits for the other ranks' steps (they are stopped at the same moment: a healthy rank's
# come within moments), then its supervisor for the files of ranks that could not hand theirs over. Both count
# against the stop grace a launcher gives process 0 before it kills it, record unwritten: Slurm's KillWait (30 s by
# default, 5 s on the test cluster, where waiting 5 s lost the whole record), benchrun's 20 s, torchrun's 30 s.
WAIT_S = 3.0
COLLECT_WAIT_S = 1.0
# How long a stopped rank other than 0 stays before it leaves: until process 0 has had the time to take every rank's
# steps and write the record. MPICH's Hydra ends the whole job, process 0 included, as soon as one rank of a job that
# initialised MPI (Horovod's ranks do) leaves without MPI_Finalize: a rank that left at once lost the record.
LINGER_S = WAIT_S + COLLECT_WAIT_S + 2.0
STOPPED = ("interrupted", "timeout")


def steps_dir(run_token: str | None, rendezvous_port: int) -> Path:
    """Where the ranks of this run write their steps: named after what every rank of the run shares and no other
    run does at the same time (its token, else its rendezvous port)."""
    identity = run_token or f"port {rendezvous_port}"
    return Path(tempfile.gettempdir()) / f"dlbench-steps-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def payload(rank: int, host: str, role: dict, kept: dict, signal: str) -> dict:
    """What a stopped rank keeps (Measurement.kept_so_far: its timed loops, totals.loop_payload each, and the record
    sections only it can give), where it ran and what stopped it."""
    return {"rank": rank, "host": host, "role": role, "signal": signal, "loops": kept["loops"],
            "sections": kept.get("sections", {})}


def keep(path: str | os.PathLike, steps: dict) -> None:
    """A rank's steps (payload) to `path`: written beside it, fsynced and renamed onto it, so process 0 reads it whole
    or not at all."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w") as out:
            json.dump(steps, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise


def rank_file(directory: Path, rank: int) -> Path:
    return directory / f"rank-{rank}.json"


def receive(rendezvous, directory: Path, size: int, wait_s: float = WAIT_S) -> None:
    """Process 0's worker, stopped: every other rank's steps into `directory`, waited for up to `wait_s` until each
    is there, written by its rank (same host) or handed over the rendezvous (any host: written here)."""
    deadline = time.monotonic() + wait_s
    while True:
        for rank, steps in rendezvous.handed_over().items():
            if 0 < rank < size and not rank_file(directory, rank).exists():
                keep(rank_file(directory, rank), steps)
        if all(rank_file(directory, rank).exists() for rank in range(1, size)) or time.monotonic() >= deadline:
            return
        time.sleep(0.05)


def collect(directory: Path, size: int, since: float, wait_s: float = COLLECT_WAIT_S) -> dict[int, dict]:
    """Every rank's steps written since `since` (epoch s; an older file is another run's), waited for up to `wait_s`
    until all `size` ranks' are there; then the directory is removed."""
    found: dict[int, dict] = {}
    deadline = time.monotonic() + wait_s
    while True:
        for rank in range(size):
            path = rank_file(directory, rank)
            if rank in found or not path.exists():
                continue
            try:
                if path.stat().st_mtime >= since - 1:
                    found[rank] = json.loads(path.read_text())
            except (OSError, ValueError):
                pass  # being replaced this moment, or unreadable: looked at again
        if len(found) == size or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    shutil.rmtree(directory, ignore_errors=True)
    return found


def _cut(loop: dict, steps: int) -> dict:
    """A rank's timed loop cut to its first `steps` steps (a step's wall time is its own: the loop's is their sum)."""
    if steps == len(loop["step_times_s"]):
        return loop
    per_step = loop["images"] // max(1, len(loop["step_times_s"]))
    times = loop["step_times_s"][:steps]
    return {**loop, "images": per_step * steps, "wall_time_s": sum(times), "step_times_s": times,
            "input_wait_s": loop["input_wait_s"][:steps], "device_state": None,
            "energy": {"joules": None, "reason": "cut to the steps every rank completed: not read"}}


def kept(found: dict[int, dict], size: int, batch_size: int) -> tuple[dict, str]:
    """(the record's measured sections, what the error message adds) from every rank's steps: per repeat, the steps
    every rank completed (a stop cuts the ranks at different steps), totalled over ranks as an `ok` run's are. A rank
    whose steps are missing keeps every total out: a total without its images would be wrong, not smaller."""
    timed = {rank: sum(len(loop["step_times_s"]) for loop in found[rank]["loops"]) for rank in sorted(found)}
    counts = ", ".join(f"rank {rank} {n}" for rank, n in timed.items())
    missing = [rank for rank in range(size) if rank not in found]
    if missing:
        names = ", ".join(str(rank) for rank in missing)
        return {}, (f"; the steps of rank{'s' if len(missing) > 1 else ''} {names} are missing (stopped before it could "
                    f"hand them over): no totals kept"
                    f"{f' (steps timed: {counts})' if counts else ''}")
    loops = [found[rank]["loops"] for rank in range(size)]
    common = [min(len(rank_loops[r]["step_times_s"]) if r < len(rank_loops) else 0 for rank_loops in loops)
              for r in range(max(len(rank_loops) for rank_loops in loops))]
    repeats = [r for r, steps in enumerate(common) if steps]
    if not repeats:
        return {}, f"; no step was timed by every rank (steps timed: {counts}): nothing kept"
    per_rank = [[_cut(rank_loops[r], common[r]) for r in repeats] for rank_loops in loops]
    peers = [{"host": found[rank]["host"], "role": found[rank]["role"]} for rank in range(size)]
    sections = {**aggregate(per_rank, batch_size), "ranks": rank_rows(per_rank, list(range(size)), peers)}
    given = found[0].get("sections", {})
    if "accuracy" in given:  # process 0's curve so far (time to accuracy): its training rate is the run's, over ranks
        given = {**given, "accuracy": {**given["accuracy"],
                                       "train_images_per_sec": sections["throughput"]["images_per_sec"]}}
    sections.update(given)
    every = sum(common)
    return sections, (f"; steps timed: {counts}; totals over the {every} step{'s' if every != 1 else ''} every rank "
                      f"completed")

