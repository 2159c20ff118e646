"""GPU on first contact: two device calls validate every GPU path of bench (issue 23; perf/gpu.md).

    python3 perf/gpu_validate.py --call 1 --out $OUT          # on the lent GPU machine, then at once --call 2
    python3 perf/gpu_validate.py --dry-run                    # parse every planned command; each call's fit
    python3 perf/gpu_validate.py --cpu-smoke --out DIR        # every call, a few tiny steps each, on a CPU
    python3 perf/gpu_validate.py report DIR [DIR ...]         # perf/gpu.md's tables

The device tool gives a task 15 minutes of device time, a machine's start included, so two calls on one
machine, back to back (gpu_plan.py has the steps, their estimates and each call's deadline):
- call 1 (~8 min), the essentials in value order: preflight (versions, a bf16 matrix product and a device
  copy as the machine's own ceilings, missing packages); a gate run that ends the call at once if it
  fails; a forced out of memory (status oom, exit 3) then a clean run at once; device mapping
  (CUDA_VISIBLE_DEVICES by UUID with LOCAL_RANK; an empty CUDA_VISIBLE_DEVICES with --device gpu: one
  line, exit 2, nothing written); the GPU tests (tests/test_gpu.py); a cut of the models x precisions x
  layouts matrix that holds each of them once; and phase B: ResNet-50 224 px batch 256 amp-bf16
  channels_last, side by side in rotated order, each run a fresh process: bench under
  --step-timing sync and events, a bare loop syncing every step as bench does by default, a fast bare
  loop (CUDA events, one sync at each end, cudnn.benchmark on) and, given --timm-benchmark, timm's
  benchmark.py in train mode; ratios to the fast loop with 95% t-intervals over 2-3 rounds.
- call 2 (~3.5 min), on the still-warm machine: `bench comm` over NCCL (one rank), DDP with one rank
  and --trace, --data-dir on a make-dataset tree, --find-max-batch, --compile; then, as time allows,
  phase B's amp-fp16 and tf32 and the rest of the matrix.

Every GPU record is checked (gpu_checks.check_record): allocator <= reserved <= NVML device peak <=
device total; energy from NVML with a plausible average power; MFU present and below 0.5; the precision
and the step timing really in effect; a finite loss. This process never opens a CUDA context (NVML's
device peak counts every process on the GPU): every GPU action is a fresh subprocess, a failed step is
recorded and the run goes on (the gate excepted), a step whose time estimate does not fit before
--deadline-s is skipped (a shorter one after it may still run), the rest is stopped at it, and every
result is appended under --out as it comes (steps.jsonl, records.jsonl, comm.jsonl, log.txt: flat,
plain names, at most 8 files, the device tool's $OUT rules), so a call cut short still returns what was
done.

Imports: the standard library; bench's own argparse parsers for --dry-run (no framework); the project's
statistics (benchmarks.measure.stats: numpy, scipy) for the speed ratios' intervals. Exit: 0 every step passed
(steps skipped for the deadline are listed), 1 a step failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its modules beside it, also when loaded by path
from gpu_checks import check_out_dir, check_record, check_search
from gpu_plan import CALLS, CPU_SMOKE, DEADLINE_S, GPU, Plan, Step, _value
from gpu_report import _json_lines, report

ROOT = Path(__file__).resolve().parent.parent
OUT_FILES = ("steps.jsonl", "records.jsonl", "comm.jsonl", "log.txt")
DEADLINE_MARGIN_S = 10.0  # kept free before --deadline-s to write the last lines
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# -- running -----------------------------------------------------------------------------------------


class Runner:
    """Runs a call's steps, each a fresh process, appending every result under `out` as it comes."""

    def __init__(self, plan: Plan, out: Path, deadline_s: float, python: str = sys.executable):
        self.plan, self.out, self.python = plan, out, python
        self.started = time.monotonic()
        self.deadline = self.started + deadline_s - DEADLINE_MARGIN_S
        self.on_gpu = plan.profile.device == "gpu"
        self.failed = False
        self.gate_failed = False
        self.call = None  # the call being run
        out.mkdir(parents=True, exist_ok=True)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def append(self, name: str, text: str) -> None:
        with open(self.out / name, "a") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())

    def result(self, step: Step, status: str, seconds: float, **details) -> dict:
        line = {"call": self.call, "phase": step.phase, "step": step.name, "kind": step.kind, "status": status,
                "seconds": round(seconds, 2), "profile": self.plan.profile.name, **details}
        self.append("steps.jsonl", json.dumps(line) + "\n")
        if status == "fail":
            self.failed = True
        mark = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[status]
        problems = "; ".join(details.get("problems", [])) or details.get("reason", "")
        print(f"gpu_validate: {mark} {step.phase} {step.name} ({seconds:.1f} s){': ' + problems if problems else ''}",
              file=sys.stderr, flush=True)
        return line

    def log(self, step: Step, text: str) -> None:
        tail = text[-6000:]
        self.append("log.txt", f"==== {step.phase} {step.name} ====\n{tail}\n")

    def command(self, step: Step) -> list[str]:
        if step.kind in ("bench", "comm"):
            output = step.output or str(self.out / ("comm.jsonl" if step.kind == "comm" else "records.jsonl"))
            extra = ["--json", "--output", output]
            if step.kind == "comm" or _value(step.argv, "--strategy") == "ddp":  # never another run's ports
                extra += ["--rendezvous-port", str(free_port())]
            return [self.python, "-m", "benchmarks", *step.argv, *extra]
        if step.kind == "dataset":
            return [self.python, "-m", "benchmarks", *step.argv]
        if step.kind in ("probe", "timm"):
            return [self.python, *step.argv]
        return list(step.argv)  # pytest

    def spawn(self, step: Step, timeout: float) -> tuple[subprocess.CompletedProcess | None, float]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **step.env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        began = time.monotonic()
        command = self.command(step)
        # Its own process group: at the deadline the whole of it goes (pytest's and bench's children too).
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            from benchmarks.core.processes import stop_process_group  # standard library only

            stop_process_group(proc)
            stdout, stderr = proc.communicate()
            self.log(step, f"$ {' '.join(command)}\nstopped after {timeout:.0f} s\n{stderr}")
            return None, time.monotonic() - began
        return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr), time.monotonic() - began

    def timeout_for(self, step: Step) -> float | None:
        """Seconds this step may take: until the deadline; None when its estimate (an upper bound on the
        GPU) does not fit before it: that step is skipped and a shorter one after it may still run."""
        remaining = self.remaining()
        return None if remaining < step.estimate_s else remaining

    def run(self, call: str) -> int:
        self.call = call
        steps = self.plan.steps(call)
        index = 0
        while index < len(steps):
            step = steps[index]
            timeout = self.timeout_for(step)
            if timeout is None:
                self.result(step, "skip", 0.0, reason=f"not started: the deadline leaves {max(self.remaining(), 0):.0f} s "
                                                      f"of the ~{step.estimate_s:.0f} s it may take")
                index += 1
                continue
            line = self.speed(step, timeout) if step.kind == "speed" else self.one(step, timeout)
            if step.name == "preflight" and line["status"] == "pass":
                self.plan.facts = line["facts"]
                steps = steps[:index + 1] + self.plan.steps(call)[index + 1:]  # the UUID is known now
            if step.gate and line["status"] != "pass":
                self.gate_failed = True
                for rest in steps[index + 1:]:
                    self.result(rest, "skip", 0.0, reason=f"not started: the gate step {step.name} failed")
                break
            index += 1
        problems = check_out_dir(self.out)
        if problems:
            self.failed = True
            print(f"gpu_validate: --out breaks the device's rules: {'; '.join(problems)}", file=sys.stderr)
        return EXIT_FAILED if self.failed else EXIT_OK

    def one(self, step: Step, timeout: float) -> dict:
        if step.kind == "bench" and "--find-max-batch" not in step.argv:
            step = dataclasses.replace(step, argv=[*step.argv, "--timeout", f"{max(timeout - 15, 5):.0f}"])
        done, seconds = self.spawn(step, timeout)
        if done is None:
            return self.result(step, "fail", seconds, problems=[f"no answer within {timeout:.0f} s (killed)"])
        handler = {"bench": self.judge_bench, "comm": self.judge_comm, "dataset": self.judge_plain,
                   "probe": self.judge_probe, "pytest": self.judge_pytest, "timm": self.judge_plain}[step.kind]
        status, details = handler(step, done)
        if status == "fail":
            self.log(step, f"$ {' '.join(self.command(step))}\nexit {done.returncode}\n{done.stderr}")
        return self.result(step, status, seconds, exit_code=done.returncode, **details)

    def judge_bench(self, step: Step, done) -> tuple[str, dict]:
        problems = []
        if done.returncode != step.expect_exit:
            problems.append(f"exit {done.returncode}, expected {step.expect_exit}: {_last_line(done.stderr)}")
        if step.expect_status == "none":  # refused: one line naming the problem, no traceback, nothing written
            errors = [line for line in done.stderr.splitlines() if line.startswith("bench: error:")]
            if len(errors) != 1 or "--device gpu" not in errors[0] or "Traceback" in done.stderr:
                problems.append(f"expected one 'bench: error: --device gpu ...' line: {done.stderr[-500:]!r}")
            if step.output and Path(step.output).exists():
                problems.append(f"{step.output} was written")
            return ("fail" if problems else "pass"), {"problems": problems, "message": errors[0] if errors else None}
        records = _json_lines(done.stdout)
        if not records:
            return "fail", {"problems": problems + ["no record on stdout"]}
        notes = []
        for record in records:
            found, noted = check_record(record, step, self.on_gpu)
            problems += found
            notes += noted
        if step.expect_status == "search":
            problems += check_search(records)
        return ("fail" if problems else "pass"), {"problems": problems, "notes": notes,
                                                  "summary": [summarize(r) for r in records]}

    def judge_comm(self, step: Step, done) -> tuple[str, dict]:
        records = _json_lines(done.stdout)
        problems = [] if done.returncode == 0 else [f"exit {done.returncode}: {_last_line(done.stderr)}"]
        if not records or records[-1].get("status") != "ok":
            problems.append(f"comm record status {records[-1].get('status') if records else None}")
        summary = None
        if records:
            r = records[-1]
            summary = {"backend": (r.get("config") or {}).get("backend"), "status": r.get("status")}
        return ("fail" if problems else "pass"), {"problems": problems, "summary": summary}

    def judge_plain(self, step: Step, done) -> tuple[str, dict]:
        problems = [] if done.returncode == 0 else [f"exit {done.returncode}: {_last_line(done.stderr)}"]
        return ("fail" if problems else "pass"), {"problems": problems, "stdout_tail": done.stdout[-500:]}

    def judge_probe(self, step: Step, done) -> tuple[str, dict]:
        """gpu_probe.py's JSON line: the preflight's facts (missing packages, NVML) or a bare loop's rate."""
        records = _json_lines(done.stdout)
        facts = records[-1] if records else {}
        problems = [] if done.returncode == 0 else [f"exit {done.returncode}: {facts.get('error') or _last_line(done.stderr)}"]
        if facts.get("missing_modules"):
            problems.append(f"missing Python packages: {', '.join(facts['missing_modules'])} (carry .whl: scripts/gpu-carry.sh)")
        if self.on_gpu and facts.get("nvml_error"):
            problems.append(f"NVML: {facts['nvml_error']}")
        return ("fail" if problems else "pass"), {"problems": problems, "facts": facts}

    def judge_pytest(self, step: Step, done) -> tuple[str, dict]:
        summary = _last_line(done.stdout)
        problems = []
        if done.returncode != 0 and not (self.plan.profile.pytest_expect == "skipped" and done.returncode == 5):
            problems.append(f"pytest exit {done.returncode}: {summary}")
        if self.plan.profile.pytest_expect not in summary:
            problems.append(f"expected the GPU tests {self.plan.profile.pytest_expect}: {summary}")
        if self.plan.profile.pytest_expect == "passed" and ("skipped" in summary or "failed" in summary):
            problems.append(f"not all GPU tests passed: {summary}")
        return ("fail" if problems else "pass"), {"problems": problems, "summary": summary,
                                                  "stdout_tail": done.stdout[-1500:]}

    def speed(self, step: Step, timeout: float) -> dict:
        """Phase B: rounds of every side in rotated order, each run a fresh process; ratios to bare-fast."""
        sides = self.plan.speed_sides()
        names = list(sides)
        rates = {name: [] for name in names}
        began = time.monotonic()
        rounds_done = 0
        for round_ in range(self.plan.profile.speed_rounds):
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            if self.remaining() < sum(sides[n].estimate_s for n in names):
                break
            for name in order:
                line = self.one(dataclasses.replace(sides[name], name=f"{sides[name].name}-r{round_ + 1}"), self.remaining())
                rates[name].append(side_rate(sides[name].kind, line) if line["status"] == "pass" else None)
            rounds_done += 1
        summary = speed_summary(rates)
        problems = [f"{name}: {sum(r is None for r in values)} of {len(values)} runs failed"
                    for name, values in rates.items() if any(r is None for r in values)]
        if rounds_done < 2:
            problems.append(f"{rounds_done} complete rounds: no interval without 2")
        return self.result(step, "fail" if problems else "pass", time.monotonic() - began, problems=problems,
                           rates=rates, ratios=summary, order="rotated each round; each run a fresh process")


def side_rate(kind: str, line: dict) -> float | None:
    if kind == "bench":
        return line["summary"][-1]["images_per_sec"]
    if kind == "timm":
        match = re.findall(r'"train_samples_per_sec":\s*([\d.]+)', line.get("stdout_tail", ""))
        return float(match[-1]) if match else None
    return (line.get("facts") or {}).get("images_per_sec")


def speed_summary(rates: dict) -> dict:
    """Mean images/sec of each side and its ratio to bare-fast per round: mean and 95% t half-width."""
    from benchmarks.measure.stats import Stats, t_halfwidth

    summary = {}
    reference = rates.get("bare-fast", [])
    for name, values in rates.items():
        known = [v for v in values if v is not None]
        if not known:
            continue
        ratios = [a / b for a, b in zip(values, reference) if a is not None and b]
        summary[name] = {"images_per_sec": Stats.of(known).mean, "ci95": t_halfwidth(known), "n": len(known),
                         "ratio_to_bare_fast": Stats.of(ratios).mean if ratios else None,
                         "ratio_ci95": t_halfwidth(ratios) if ratios else None}
    return summary


def summarize(record: dict) -> dict:
    """The numbers of a record the report shows (the full record is in records.jsonl)."""
    throughput, memory = record.get("throughput") or {}, record.get("memory") or {}
    energy, flops, precision = record.get("energy") or {}, record.get("flops") or {}, record.get("precision") or {}
    framework = record["provenance"].get("framework") or {}
    return {"run_id": record["run_id"], "status": record["status"], "model": record["config"]["model"],
            "batch": record["config"]["batch_size"], "image_size": record["config"]["image_size"],
            "precision": precision.get("effective", record["config"]["precision"]),
            "data_format": record["config"]["data_format"], "device": framework.get("device_name"),
            "images_per_sec": throughput.get("images_per_sec"), "ci95": throughput.get("ci95_halfwidth"),
            "mfu": flops.get("mfu"), "mfu_vs_achievable": flops.get("mfu_vs_achievable"),
            "ceiling_flops_per_sec": (record.get("ceiling") or {}).get("flops_per_sec"),
            "ceiling_math": (record.get("ceiling") or {}).get("math"), "allocator_peak_bytes": memory.get("allocator_peak_bytes"),
            "reserved_peak_bytes": memory.get("reserved_peak_bytes"), "device_peak_bytes": memory.get("device_peak_bytes"),
            "device_total_bytes": memory.get("device_total_bytes"), "joules": energy.get("joules"),
            "average_watts": energy.get("average_watts"), "tf32_in_effect": precision.get("tf32_in_effect"),
            "final_loss": record.get("final_loss"), "error": (record.get("error") or {}).get("message"),
            "max_batch": (record.get("batch_search") or {}).get("max_batch"),
            "compile_time_s": (record.get("compile") or {}).get("compile_time_s")}


def free_port() -> int:
    """A port nothing listens on now, with the next one for torch's store (bench uses port + 1)."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65000:
            return port
    return 2210


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed((text or "").splitlines()) if line.strip()), "")


# -- dry run -----------------------------------------------------------------------------------------


def dry_run(timm: str | None) -> int:
    """Every planned bench, bench comm and make-dataset command line of both profiles through bench's own
    parsers and validation (no framework imported); the other commands listed; each call's fit."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.cli import bench_parser, config_of, dataset_parser
    from benchmarks.comm.cli import options_from
    from benchmarks.core.errors import UsageError

    failures, count = 0, 0
    with tempfile.TemporaryDirectory(prefix="gpu-validate-dry-") as scratch:
        for profile in (GPU, CPU_SMOKE):
            plan = Plan(profile, Path(scratch), timm)
            for call in CALLS:
                steps = plan.steps(call)
                planned_s, skipped_first, as_time_allows = plan.fit(call)
                print(f"# {profile.name} call {call}: {len(steps)} steps, the planned ones ~{planned_s:.0f} s by their "
                      f"estimates (deadline {DEADLINE_S[call]:.0f} s less {DEADLINE_MARGIN_S:.0f} s kept free); when time "
                      f"runs short skipped first: {', '.join(skipped_first[:4])}, ...; as time allows: "
                      f"{', '.join(as_time_allows[:3]) or 'nothing'}{', ...' if len(as_time_allows) > 3 else ''}")
                if any(s.kind == "speed" for s in steps):
                    steps += list(plan.speed_sides().values())
                for step in steps:
                    count += 1
                    try:
                        if step.kind == "bench":
                            args = bench_parser().parse_args(step.argv)
                            if args.data_dir is not None:  # made by the step before it
                                args.data_dir = None
                            config_of(args, installed_here=False)
                        elif step.kind == "comm":
                            options_from(bench_parser().parse_args(step.argv))
                        elif step.kind == "dataset":
                            dataset_parser().parse_args(step.argv[1:])
                        checked = step.kind in ("bench", "comm", "dataset")
                        print(f"{'parsed' if checked else 'listed'} {call} {step.phase} {step.name} ~{step.estimate_s:.0f} s: "
                              f"{'bench ' if checked else ''}{' '.join(step.argv)}")
                    except UsageError as error:
                        failures += 1
                        print(f"BAD {call} {step.phase} {step.name}: {' '.join(step.argv)}: {error}")
    print(f"gpu_validate: dry run: {count} commands, {failures} rejected")
    return EXIT_FAILED if failures else EXIT_OK


# -- command line ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        p = argparse.ArgumentParser(prog="gpu_validate.py report", description="perf/gpu.md's tables from results folders")
        p.add_argument("folders", nargs="+", type=Path)
        args = p.parse_args(argv[1:])
        try:
            print(report(args.folders))
        except FileNotFoundError as error:
            print(f"gpu_validate: report: {error}", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--call", choices=CALLS + ("all",), default="all", help="which device call (default: all, in order)")
    p.add_argument("--out", type=Path, help="folder the results are appended to (the device's $OUT)")
    p.add_argument("--deadline-s", type=float, help="start nothing that could not end by then (default: the call's own, "
                   + ", ".join(f"call {c}: {s:.0f} s" for c, s in DEADLINE_S.items()) + "; all: their sum)")
    p.add_argument("--dry-run", action="store_true", help="parse every planned command with bench's parsers; run nothing")
    p.add_argument("--cpu-smoke", action="store_true", help="every call, a few tiny steps each, on this CPU (CI)")
    p.add_argument("--timm-benchmark", metavar="PATH", help="timm's benchmark.py: one more side in phase B")
    p.add_argument("--scratch", type=Path, help="datasets and traces (default: a temporary folder, removed after)")
    args = p.parse_args(argv)
    if args.dry_run:
        return dry_run(args.timm_benchmark)
    if args.out is None:
        print("gpu_validate: --out DIR is needed (or --dry-run, or: report DIR)", file=sys.stderr)
        return EXIT_USAGE
    calls = CALLS if args.call == "all" else (args.call,)
    if args.deadline_s is None:
        args.deadline_s = sum(DEADLINE_S[call] for call in calls)
    if args.deadline_s <= DEADLINE_MARGIN_S:
        print(f"gpu_validate: --deadline-s must be above {DEADLINE_MARGIN_S:.0f}", file=sys.stderr)
        return EXIT_USAGE
    if args.timm_benchmark and not Path(args.timm_benchmark).is_file():
        print(f"gpu_validate: --timm-benchmark {args.timm_benchmark}: no such file", file=sys.stderr)
        return EXIT_USAGE
    if args.out.exists() and not args.out.is_dir():
        print(f"gpu_validate: --out {args.out}: not a folder", file=sys.stderr)
        return EXIT_USAGE
    sys.path.insert(0, str(ROOT))
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="gpu-validate-"))
    try:
        plan = Plan(CPU_SMOKE if args.cpu_smoke else GPU, scratch, args.timm_benchmark)
        runner = Runner(plan, args.out, args.deadline_s)
        codes = []
        for call in calls:
            codes.append(runner.run(call))
            if runner.gate_failed or runner.remaining() <= 0:
                break
        return max(codes)
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
