"""Multi-rank faults, each injected for real, each expected to end within a stated bound (issue 26).

    python perf/fault_matrix.py [--cases torch-ddp,tf-allreduce,tf-ps,comm] [--faults F,...] [--long]
                                [--out perf/fault_matrix/DATE.jsonl]

Each row starts a 2-worker run with `benchrun run --launcher local`, watches bench's progress
lines for the phase it wants (start-up, warmup, the timed loop, the final gather), then does to one
process what a failing cluster does: SIGKILL of a rank (bench and its worker: a node gone), of the
chief, of a parameter server, or SIGSTOP of a rank's worker (a hung node) with and without
`--timeout`. It then measures the time from the fault to benchrun's exit and checks what the user
gets: a non-zero exit, a record (bench's, or benchrun's host-side one) whose error names the rank
and its host, and no process of the run left. A row passes only when all of that holds within its
bound; the bound is the project's stated one (docs/results.md, "Faults"), not fitted to the result.

Bounds: a killed rank is noticed by process 0's rendezvous (its connection closes; 5 s for a report)
or by the collective failing: BOUND_KILL_S. At start-up, before the rank has met process 0, nobody
can tell it is gone but the launcher, which stops process 0 3 x STOP_GRACE_S after the rank died
(process 0 may still be importing its framework): BOUND_STARTUP_S. A stopped rank answers nothing; `--timeout T` ends the
run at T (plus the supervisor's grace); without it the collectives' own timeout (bench's
wait without --timeout, RENDEZVOUS_TIMEOUT_S = 300 s) does: `--long` runs that one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from datetime import date
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.core.processes import STOP_GRACE_S
from benchmarks.distributed.rendezvous import SILENT_AFTER_S
from benchmarks.settings.options import RENDEZVOUS_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[1]
BOUND_KILL_S = 30.0
BOUND_STARTUP_S = 5.0 * STOP_GRACE_S  # the launcher's 3 x grace, then process 0's stop (SIGTERM, 2 x grace)
STOP_TIMEOUT_S = 45  # --timeout of the SIGSTOP row that has one (--stop-timeout: a loaded machine needs more)
SILENT_MARGIN_S = 2.0  # a stopped rank is named once silent for SILENT_AFTER_S; its last beat may precede the stop
GRACE_S = 2.0 * STOP_GRACE_S  # the supervisor's stop grace (SIGTERM, then SIGKILL) and the record's write
PHASES = {  # bench's progress lines (stderr) that say a phase has begun, and how long after them to act
    "startup": (re.compile(r"meeting at "), 0.0),
    "warmup": (re.compile(r"\(warmup\)|warmup: \d+ batches"), 0.0),
    # the first timed step; under ps the chief prints no step lines: well into the loop after warmup
    "timed": (re.compile(r"\(repeat 1\)"), 0.0),
    "ps-timed": (re.compile(r"warmup: \d+ batches"), 10.0),
    "gather": (re.compile(r"repeat 1/1: "), 0.0),
    "comm": (re.compile(r"serving|measuring|allreduce"), 3.0),
}
TRAIN = ["--image-size", "64", "--batch-size", "2", "--num-warmup-batches", "3", "--num-threads", "1",
         "--display-every", "1"]
HOROVOD_IMAGE = "dlbench-horovod-openmpi:latest"
CASES = {  # name -> (benchrun run options, bench arguments, the rank to fault, the chief's rank, the PS's rank)
    "torch-ddp": (["-n", "2"], ["--framework", "torch", "--strategy", "ddp", "--model", "alexnet", *TRAIN], 1, 0, None),
    "tf-allreduce": (["-n", "2"], ["--framework", "tensorflow", "--strategy", "allreduce", "--model", "alexnet", *TRAIN],
                     1, 0, None),
    "tf-ps": (["-n", "2", "--num-ps", "1"], ["--framework", "tensorflow", "--strategy", "ps", "--model", "alexnet", *TRAIN],
              1, 0, 3),
    "comm": (["-n", "2"], ["--framework", "torch", "comm", "--backend", "gloo", "--ops", "allreduce",
                           "--max-bytes", "64M", "--iters", "400"], 1, 0, None),
    # in its image, under horovodrun (gloo), as tests/test_horovod.py runs it
    "horovod": (["--launcher", "horovodrun", "-n", "2"],
                ["--framework", "torch", "--strategy", "horovod", "--model", "alexnet", *TRAIN], 1, 0, None),
}
CONTAINER = "dlbench-fault-matrix"
RANK_VARIABLES = ("RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def benchrun_argv(case: str, results: Path, horovod_image: str = HOROVOD_IMAGE) -> list[str]:
    """benchrun run, on the host (local launcher) or in the Horovod image (--results mounted)."""
    if case == "horovod":
        return ["docker", "run", "--rm", "--name", CONTAINER, "--network=host", "--ipc=host", "-v", f"{results}:/results",
                "--entrypoint", "benchrun", horovod_image, "run", "--runtime", "local", "--results", "/results"]
    return [sys.executable, "-m", "runners", "run", "--runtime", "local", "--launcher", "local",
            "--results", str(results)]


def fault_rows(case: str, long: bool, stop_timeout_s: float = STOP_TIMEOUT_S) -> list[dict]:
    """The faults of one case: phase to wait for, whom, which signal, bench's --timeout (or None), the bound."""
    _, _, rank, chief, ps = CASES[case]
    loop = {"comm": "comm", "tf-ps": "ps-timed"}.get(case, "timed")
    phases = ("comm",) if case == "comm" else ("startup", "warmup", loop, "gather")
    rows = [{"fault": f"kill-rank-{phase}", "phase": phase, "rank": rank, "signal": "KILL", "timeout_s": None,
             "bound_s": BOUND_STARTUP_S if phase == "startup" else BOUND_KILL_S} for phase in phases]
    rows.append({"fault": "kill-chief", "phase": loop, "rank": chief, "signal": "KILL", "timeout_s": None,
                 "bound_s": BOUND_KILL_S})
    if ps is not None:
        rows.append({"fault": "kill-ps", "phase": loop, "rank": ps, "signal": "KILL", "timeout_s": None, "bound_s": BOUND_KILL_S})
    rows.append({"fault": "stop-rank-timeout", "phase": loop, "rank": rank, "signal": "STOP",
                 "timeout_s": stop_timeout_s, "bound_s": stop_timeout_s + GRACE_S})
    if long:
        rows.append({"fault": "stop-rank", "phase": loop, "rank": rank, "signal": "STOP", "timeout_s": None,
                     "bound_s": RENDEZVOUS_TIMEOUT_S + GRACE_S})
    return rows


def run_processes(port: int) -> list[psutil.Process]:
    """Every process of the run: bench's (their command line names its rendezvous port, in a container
    too) and their children (workers, data loaders)."""
    marked = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(a == "--rendezvous-port" and b == str(port) for a, b in zip(cmdline, cmdline[1:])):
            marked.append(proc)
    found = {p.pid: p for p in marked}
    for proc in marked:
        try:
            found.update({c.pid: c for c in proc.children(recursive=True)})
        except psutil.Error:
            pass
    return list(found.values())


def rank_processes(port: int, rank: int) -> list[psutil.Process]:
    """bench and its worker running `rank` of this run."""
    found = []
    for proc in run_processes(port):
        try:
            environ = proc.environ()
            if any(environ.get(name) == str(rank) for name in RANK_VARIABLES) and "bench" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


def run_row(case: str, row: dict, out_dir: Path, port: int, horovod_image: str = HOROVOD_IMAGE) -> dict:
    launch, bench, *_ = CASES[case]
    results = out_dir / f"{case}-{row['fault']}"
    results.mkdir(parents=True, exist_ok=True)
    results.chmod(0o777)  # the image's user (not root) writes there
    output = results / "records.jsonl"
    output.unlink(missing_ok=True)
    endless = [] if case == "comm" else ["--num-batches", "100000"]
    if case != "comm" and row["phase"] == "gather":
        endless = ["--num-batches", "4"]  # the gather comes right after a short loop
    ports = ["--rendezvous-port", str(port), "--worker-port", str(port + 10), "--ps-port", str(port + 20)]
    timeout_s = row["timeout_s"]
    limit = [] if timeout_s is None else ["--timeout", f"{timeout_s:g}"]
    argv = [*benchrun_argv(case, results, horovod_image), *launch, "--", *bench, *endless, *ports, *limit]
    started = time.monotonic()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    seen, stderr_lines, stdout_lines = threading.Event(), [], []

    def watch():
        for line in proc.stderr:
            stderr_lines.append(line)
            if PHASES[row["phase"]][0].search(line):
                seen.set()

    readers = [threading.Thread(target=watch, daemon=True),
               threading.Thread(target=lambda: stdout_lines.extend(proc.stdout), daemon=True)]
    for reader in readers:
        reader.start()
    result = {"case": case, **{k: row[k] for k in ("fault", "phase", "rank", "signal", "bound_s")}}
    deadline = time.monotonic() + 300
    while not seen.wait(0.5) and proc.poll() is None and time.monotonic() < deadline:
        pass
    if not seen.is_set():
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        return {**result, "verdict": "harness", "why": f"phase {row['phase']} never seen",
                "stderr_tail": "".join(stderr_lines[-6:])[-800:]}
    time.sleep(PHASES[row["phase"]][1])
    victims = []
    deadline = time.monotonic() + 60
    while not victims and time.monotonic() < deadline:
        victims = rank_processes(port, row["rank"])
        time.sleep(0.05)
    everyone = [p.pid for p in run_processes(port)]
    victims = [v for v in victims if row["signal"] == "KILL" or "benchmarks.run.worker" in " ".join(v.cmdline())]
    for victim in victims:
        try:
            victim.send_signal(getattr(signal, f"SIG{row['signal']}"))
        except psutil.Error:
            pass
    faulted = time.monotonic()
    # a stopped rank is named once silent for SILENT_AFTER_S: a stop closer than that to --timeout is too late
    too_late = (timeout_s is not None and row["signal"] == "STOP"
                and faulted - started > timeout_s - SILENT_AFTER_S - SILENT_MARGIN_S)
    try:
        proc.wait(timeout=row["bound_s"] + 120)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        hung = True
    ended_s = time.monotonic() - faulted
    for reader in readers:
        reader.join(5)
    for victim in victims:  # a stopped worker must not outlive the row
        try:
            victim.send_signal(signal.SIGCONT)
        except psutil.Error:
            pass
    time.sleep(1)
    left = [pid for pid in everyone if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    for pid in left:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    container = subprocess.run(["docker", "ps", "-aq", "--filter", f"name=^{CONTAINER}$"], capture_output=True,
                               text=True).stdout.split() if case == "horovod" else []
    if container:
        subprocess.run(["docker", "rm", "-f", *container], capture_output=True)
    records = [json.loads(line) for line in output.read_text().splitlines()] if output.exists() else []
    record = records[-1] if records else None
    message = ((record or {}).get("error") or {}).get("message") or ""
    problems, harness = [], ""
    if hung or ended_s > row["bound_s"]:
        problems.append(f"ended after {ended_s:.0f} s > bound {row['bound_s']:.0f} s" + (" (killed: hung)" if hung else ""))
    # Killed in the final gather, after process 0 had every rank's numbers (a PS worker is only waited
    # for by then): the measurement is whole, and an ok record says what was measured.
    complete = (row["phase"] == "gather" and record is not None and record.get("status") == "ok"
                and len(record.get("ranks") or []) == (record.get("world") or {}).get("workers"))
    if proc.returncode == 0 and not complete:
        problems.append("exit 0")
    if record is None:
        problems.append("no record")
    elif record.get("status") == "ok" and not complete:
        problems.append("record ok")
    elif not re.search(rf"(rank {row['rank']}|process 0) .*\bon \S", message):
        if too_late:  # a slow start, not the product's fault
            harness = (f"the stop came {faulted - started:.0f} s into a --timeout {timeout_s:g} s run, under "
                       f"{SILENT_AFTER_S + SILENT_MARGIN_S:g} s before it: too late to be called silent (raise --stop-timeout)")
        else:
            problems.append("the record does not name the rank and its host")  # a stopped one: by its silence
    if left or container:
        problems.append(f"{len(left)} processes and {len(container)} containers left")
    verdict = "FAIL" if problems else "harness" if harness else "pass"
    return {**result, "victims": len(victims), "ended_s": round(ended_s, 1), "exit": proc.returncode,
            "status": (record or {}).get("status"), "message": message[:240], "left": len(left),
            "total_s": round(time.monotonic() - started, 1), "verdict": verdict,
            "why": "; ".join(problems) or harness,
            "stderr_tail": "".join(stderr_lines[-4:])[-600:] if problems or harness else ""}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--faults", default="", help="only these faults (names as printed), comma-separated")
    p.add_argument("--long", action="store_true", help="also SIGSTOP without --timeout (5+ min per case)")
    p.add_argument("--stop-timeout", type=float, default=STOP_TIMEOUT_S,
                   help=f"--timeout of the SIGSTOP row (default {STOP_TIMEOUT_S}; the run must reach its loop within it)")
    p.add_argument("--out", type=Path, default=ROOT / "perf" / "fault_matrix" / f"{date.today()}.jsonl")
    p.add_argument("--port", type=int, default=4610, help="first rendezvous port (each row takes +0/+10/+20..)")
    args = p.parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"fault_matrix: error: unknown case {unknown[0]!r} (choices: {', '.join(CASES)})", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    scratch = args.out.parent / "records"
    scratch.mkdir(exist_ok=True)
    wanted = {f for f in args.faults.split(",") if f}
    failed = 0
    for case in cases:
        for row in fault_rows(case, args.long, args.stop_timeout):
            if wanted and row["fault"] not in wanted:
                continue
            result = run_row(case, row, scratch, args.port)
            failed += result["verdict"] != "pass"
            with open(args.out, "a") as out:
                out.write(json.dumps(result) + "\n")
            print(f"{case:13} {row['fault']:22} {result['verdict']:5} ended {result.get('ended_s', '-')} s "
                  f"(bound {row['bound_s']:.0f}) exit {result.get('exit')} {result.get('status')}: "
                  f"{result.get('why') or result.get('message', '')[:100]}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
