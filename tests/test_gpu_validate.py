"""perf/gpu_validate.py proven on a CPU, so that a lent GPU's minutes go to the GPU: every planned command
parses with bench's own parser, the device commands in perf/gpu.md fit the device tool, each call's
planned steps fit its deadline, the deadline is kept, the checks catch what a GPU record must not do,
the results obey the device's $OUT rules, and the CPU smoke runs both calls with the same code and
renders the report."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys

import pytest

from infra.helpers import ROOT, run, validate_record

SCRIPT = ROOT / "perf" / "gpu_validate.py"
GPU_MD = ROOT / "perf" / "gpu.md"
DEVICE_COMMAND_CHARS = 2000  # the device tool's limit on one command
DEVICE_COMMAND_S = 600  # one command's run
DEVICE_BUDGET_S = 900  # a task's device time, every start, call, idle wait and close counted
MACHINE_START_S = 120  # a start costs 1-2 minutes of it
CALL_OVERHEAD_S = 30  # per call: the tree's transfer, the wheels' install, Python's start, the reply
IDLE_AFTER_S = 30  # the machine stays warm (counted) this long after the last call, unless given back


def load_validator():
    spec = importlib.util.spec_from_file_location("gpu_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_validate", module)
    spec.loader.exec_module(module)
    return module


gv = load_validator()
import gpu_checks  # noqa: E402  beside gpu_validate.py, which puts perf/ on sys.path
import gpu_plan  # noqa: E402 - after load_validator() put perf/ on sys.path


def validate(*args, timeout=120):
    return run([sys.executable, SCRIPT, *args], timeout=timeout)


CHECK_IMPORTS = """
import contextlib, io, runpy, sys
script = sys.argv[1]
sys.argv = [script, "--dry-run"]
with contextlib.redirect_stdout(io.StringIO()):
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        pass
print(sorted(m for m in ("torch", "torchvision", "tensorflow", "keras", "horovod") if m in sys.modules))
"""


def test_dry_run_parses_every_planned_command_with_bench_parsers():
    result = validate("--dry-run")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "BAD" not in result.stdout and result.stdout.rstrip().endswith("0 rejected")
    parsed = [line for line in result.stdout.splitlines() if line.startswith("parsed ")]
    assert any(" comm " in line and "--backend nccl" in line for line in parsed)  # bench comm over NCCL
    assert any("--find-max-batch" in line for line in parsed) and any("make-dataset" in line for line in parsed)
    gpu_matrix = {line.split()[3] for line in parsed if " matrix-" in line and "--device gpu" in line}
    assert len(gpu_matrix) == 5 * 4 * 2  # every model x precision x layout: a cut in call 1, the rest in call 2
    assert any("--step-timing events" in line and "--device gpu" in line for line in parsed)  # phase B's events side
    imports = run([sys.executable, "-c", CHECK_IMPORTS, str(SCRIPT)])
    assert imports.stdout.strip().splitlines()[-1] == "[]", imports.stderr[-2000:]  # no framework imported


def device_commands() -> dict[str, str]:
    text = GPU_MD.read_text()
    return {call: command.strip() for call, command in
            re.findall(r"<!-- device-command call (\d) -->\n```\n(.*?)\n```", text, flags=re.S)}


def test_device_commands_in_gpu_md_fit_the_device_tool():
    commands = device_commands()
    assert sorted(commands) == list(gpu_plan.CALLS)
    for call, command in commands.items():
        assert "\n" not in command and len(command) < DEVICE_COMMAND_CHARS, (call, len(command))
        assert f"perf/gpu_validate.py --call {call} --out $OUT" in command
        assert "--deadline-s" not in command  # each call's deadline is the plan's (gpu_plan.DEADLINE_S)
        assert command.startswith("python3 -m pip install -q --no-index --no-deps") and ".whl/*.whl" in command
        assert "export PYTHONPATH=/tmp/site || exit;" in command
        named = set(re.findall(r"\$OUT/([^\s;|&>]+)", command))
        assert all(re.fullmatch(r"[A-Za-z0-9._-]+", name) for name in named), named  # flat, plain names
        assert len(named | set(gv.OUT_FILES)) <= gpu_checks.OUT_MAX_FILES
        assert gpu_plan.DEADLINE_S[call] + CALL_OVERHEAD_S < DEVICE_COMMAND_S
    held = MACHINE_START_S + sum(s + CALL_OVERHEAD_S for s in gpu_plan.DEADLINE_S.values()) + IDLE_AFTER_S
    assert held <= DEVICE_BUDGET_S, held  # one start, both calls back to back, the idle wait after


def test_each_call_s_planned_steps_fit_its_deadline_by_their_own_estimates(tmp_path):
    plan = gpu_plan.Plan(gpu_plan.GPU, tmp_path)
    for call in gpu_plan.CALLS:
        planned_s, skipped_first, as_time_allows = plan.fit(call)
        assert planned_s <= gpu_plan.DEADLINE_S[call] - gv.DEADLINE_MARGIN_S, (call, planned_s)
        steps = plan.steps(call)
        assert [s.planned for s in steps] == sorted((s.planned for s in steps), reverse=True)  # the extras last
        assert all(step.gate for step in steps[:sum(s.gate for s in steps)])  # the gates first
    first = [s.name for s in plan.steps("1")]
    assert first[:4] == ["preflight", "gate", "oom", "clean-after-oom"] and first[-1] == "speed"
    assert plan.fit("1")[1][0] == "speed"  # in value order: the comparison goes first when time runs short
    sides = plan.speed_sides()
    assert set(sides) == {"bench-sync", "bench-events", "bare-sync", "bare-fast"}
    assert plan.steps("1")[-1].estimate_s == 2 * sum(side.estimate_s for side in sides.values())  # two rounds
    every = {s.name for call in gpu_plan.CALLS for s in plan.steps(call)}
    assert {"comm", "ddp-one-rank-trace", "data-dir", "find-max-batch", "compile-default"} <= every
    matrix = [s for call in gpu_plan.CALLS for s in plan.steps(call) if s.name.startswith("matrix-")]
    cut = [s.argv for s in matrix if s.planned]
    for flag, values in (("--model", gpu_plan.GPU.models[1:]), ("--precision", ("amp-fp16", "tf32", "fp32")),
                         ("--data-format", gpu_plan.GPU.formats)):
        assert set(values) <= {gpu_plan._value(argv, flag) for argv in cut}, flag  # call 1's cut holds each


def test_deadline_starts_nothing_it_would_cut_and_says_so(tmp_path):
    out = tmp_path / "out"
    result = validate("--cpu-smoke", "--call", "2", "--deadline-s", "14", "--out", out)
    assert result.returncode == 0, result.stderr[-2000:]
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    planned = gpu_plan.Plan(gpu_plan.CPU_SMOKE, tmp_path).steps("2")
    assert [s["step"] for s in steps] == [s.name for s in planned] and {s["call"] for s in steps} == {"2"}
    assert all(s["status"] == "skip" and "deadline" in s["reason"] for s in steps)
    assert gpu_checks.check_out_dir(out) == [] and sorted(p.name for p in out.iterdir()) == ["steps.jsonl"]


def test_bad_input_is_one_line_exit_2(tmp_path):
    (tmp_path / "file").write_text("x")
    for args, message in ((["--cpu-smoke"], "--out DIR is needed"),
                          (["--out", tmp_path / "file"], "not a folder"),
                          (["--out", tmp_path / "o", "--deadline-s", "5"], "--deadline-s must be above"),
                          (["--out", tmp_path / "o", "--timm-benchmark", tmp_path / "none.py"], "no such file"),
                          (["report", tmp_path], "no steps.jsonl")):
        result = validate(*args)
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, (args, result.stderr)
        assert "Traceback" not in result.stderr


MEMORY = {"allocator_peak_bytes": 10, "reserved_peak_bytes": 12, "device_peak_bytes": 15, "device_total_bytes": 80,
          "device_unavailable_reason": None}


def test_memory_check_wants_the_four_views_ordered_and_measured():
    assert gpu_checks.memory_problems(MEMORY) == []
    assert gpu_checks.memory_problems({**MEMORY, "reserved_peak_bytes": 16}) == [
        "reserved_peak_bytes 16 > device_peak_bytes 15"]
    missing = gpu_checks.memory_problems({**MEMORY, "device_peak_bytes": None, "device_unavailable_reason": "NVML could not "
                                                                                                            "start: X"})
    assert missing == ["memory not measured: device_peak_bytes (NVML could not start: X)"]
    assert "no reason given" in gpu_checks.memory_problems({**MEMORY, "device_total_bytes": None})[0]


@pytest.mark.parametrize("asked, section, problem", [
    ("amp-bf16", {"effective": "amp-bf16", "autocast_dtype": "bfloat16", "loss_scaling": False, "tf32_in_effect": False}, None),
    ("amp-fp16", {"effective": "amp-fp16", "autocast_dtype": "float16", "loss_scaling": False, "tf32_in_effect": False},
     "loss scaling False under amp-fp16"),
    ("tf32", {"effective": "tf32", "autocast_dtype": None, "loss_scaling": False, "tf32_in_effect": False},
     "TF32 in effect: False under tf32"),
    ("fp32", {"effective": "fp32", "autocast_dtype": None, "loss_scaling": False, "tf32_in_effect": True},
     "TF32 in effect: True"),
    ("amp", {"effective": "amp-bf16", "autocast_dtype": "bfloat16", "loss_scaling": False, "tf32_in_effect": False},
     "precision amp-bf16 in effect, asked amp"),
])
def test_precision_check_wants_what_was_asked_in_effect(asked, section, problem):
    section = {"tf32_flag": section["tf32_in_effect"], "compute_capability": "9.0", **section}
    found = gpu_checks.precision_problems(section, asked, on_gpu=True)
    assert (found == []) if problem is None else any(problem in p for p in found), found


@pytest.mark.parametrize("asked, section, on_gpu, ok", [
    ("sync", {"clock": "host", "cudnn_benchmark": False}, True, True),
    ("events", {"clock": "cuda-events", "cudnn_benchmark": True}, True, True),
    ("events", {"clock": "host", "cudnn_benchmark": True}, True, False),  # asked events, timed by the host
    ("events", {"clock": "cuda-events", "cudnn_benchmark": False}, True, False),
    ("sync", {"clock": "host", "cudnn_benchmark": None}, False, True),  # a CPU: no cuDNN to set
    ("sync", None, False, False),
])
def test_step_timing_check_wants_the_clock_asked(asked, section, on_gpu, ok):
    record = {"config": {"step_timing": asked}, "step_timing": section}
    assert (gpu_checks.step_timing_problems(record, asked, on_gpu) == []) is ok


def test_per_step_checks_name_what_is_off():
    checks = gpu_checks.EXTRA_CHECKS
    assert checks["launcher-env"]({"world": {"launcher": "env"}}) == []
    assert "launcher none" in checks["launcher-env"]({"world": {"launcher": "none"}})[0]  # the variables were lost
    assert checks["strategy-ddp"]({"world": {"strategy": "none"}}) == ["strategy none"]
    assert checks["compiled"]({"compile": {"fell_back_to_eager": True, "fallback_reason": "no cc"}}) == [
        "compile fell back to eager: no cc"]


def side(ratio, ci):
    return {"images_per_sec": 2000.0 * ratio, "ci95": 10.0, "n": 2, "ratio_to_bare_fast": ratio, "ratio_ci95": ci}


def test_timing_decision_follows_gpu_md_s_rule():
    import gpu_report

    ratios = {"bench-sync": side(0.90, 0.01), "bench-events": side(0.97, 0.01), "bare-sync": side(0.91, 0.01),
              "bare-fast": side(1.0, 0.0)}
    decided = gpu_report.timing_decision(ratios)
    assert decided.startswith("make events the default: it is +0.070") and "own cost beyond its timing: 0.030" in decided
    assert gpu_report.timing_decision({**ratios, "bench-events": side(0.91, 0.01)}).startswith("keep sync")  # within 0.02
    assert gpu_report.timing_decision({**ratios, "bench-events": side(0.95, 0.04)}).startswith("keep sync")  # noise 0.05
    assert gpu_report.timing_decision({"bench-sync": side(0.9, 0.01)}).startswith("no decision")


def test_energy_check_wants_nvml_and_a_plausible_power():
    def record(joules, watts, wall, limit=700.0, source="nvml-energy-counter"):
        return {"energy": {"joules": joules, "average_watts": watts, "source": source, "unavailable_reason": "counter idle"},
                "throughput": {"total_wall_time_s": wall},
                "repeats": [{"device_state": {"power_limit_w": {"min": limit, "max": limit}}}]}

    assert gpu_checks.energy_checks(record(3000.0, 450.0, 6.7)) == ([], [])
    assert gpu_checks.energy_checks(record(None, None, 0.3)) == ([], ["energy null: counter idle"])  # too short to count
    assert gpu_checks.energy_checks(record(None, None, 5.0))[0] == ["energy null: counter idle"]
    assert "outside 20-840 W" in gpu_checks.energy_checks(record(9000.0, 1500.0, 6.0))[0][0]
    assert "energy source rapl" in gpu_checks.energy_checks(record(100.0, 100.0, 2.0, source="rapl"))[0][0]


def test_out_dir_rules_of_the_device_tool(tmp_path):
    assert gpu_checks.check_out_dir(tmp_path) == []
    for index in range(9):
        (tmp_path / f"f{index}.txt").write_text("x")
    assert gpu_checks.check_out_dir(tmp_path) == ["9 files, at most 8 come back"]
    for index in range(2, 9):
        (tmp_path / f"f{index}.txt").unlink()
    (tmp_path / "a b.txt").write_text("x")
    (tmp_path / "d1" / "d2" / "d3").mkdir(parents=True)
    (tmp_path / "d1" / "d2" / "d3" / "deep.txt").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "f0.txt")
    problems = gpu_checks.check_out_dir(tmp_path)
    assert any(p.startswith("a b.txt: a name") for p in problems)
    assert any(p.startswith("d1/d2/d3/deep.txt: more than 2 folders down") for p in problems)
    assert any(p.startswith("link: not a plain file") for p in problems)


def test_bench_options_override_keeps_one_value_per_flag():
    base = ["--model", "resnet50", "--precision", "amp-bf16", "--num-batches", "60"]
    tf32 = ["--model", "resnet50", "--precision", "tf32", "--num-batches", "60"]
    assert gpu_plan._override(base, ("--precision", "tf32")) == tf32
    assert gpu_plan._override(base, ("--compile",)) == [*base, "--compile"]
    more = ("--compile", "reduce-overhead", "--seed", "3")
    assert gpu_plan._override(base, more) == [*base, *more]


def test_cpu_smoke_runs_every_call_obeys_out_rules_and_reports(tmp_path):
    """Both device calls on tiny sizes, with the same code and checks as on the GPU, each into its own
    folder as on the device; the two run at once (their steps are CPU processes whose numbers nobody
    reads, one core each here): 44.3 s and 42.8 s on an otherwise idle 2-core machine (perf/gpu.md)."""
    outs = {call: tmp_path / f"call-{call}" for call in gpu_plan.CALLS}
    calls = {call: subprocess.Popen([sys.executable, SCRIPT, "--cpu-smoke", "--call", call, "--out", out],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for call, out in outs.items()}
    try:
        ended = {call: (proc.communicate(timeout=300)[1], proc.returncode) for call, proc in calls.items()}
    finally:
        for proc in calls.values():
            proc.kill() if proc.poll() is None else None
    steps, records = [], []
    for call, out in outs.items():
        lines = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
        failed = [(s["step"], s.get("problems"), s.get("reason")) for s in lines if s["status"] != "pass"]
        log = (out / "log.txt").read_text()[-4000:] if (out / "log.txt").exists() else ""
        assert ended[call][1] == 0 and not failed, (call, failed, ended[call][0][-4000:], log)
        assert {s["call"] for s in lines} == {call}
        assert gpu_checks.check_out_dir(out) == [] and {p.name for p in out.iterdir()} <= set(gv.OUT_FILES)
        in_file = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
        summarized = [run["run_id"] for s in lines if s["kind"] == "bench" for run in s.get("summary", [])]
        assert [r["run_id"] for r in in_file] == summarized  # every bench record, in order
        steps, records = steps + lines, records + in_file
    assert {s["phase"] for s in steps} == {"A", "B", "C"}
    names = {s["step"] for s in steps}
    for call in gpu_plan.CALLS:  # every step of the smoke's plan ran
        assert {s.name for s in gpu_plan.Plan(gpu_plan.CPU_SMOKE, tmp_path).steps(call)} <= names
    assert {"speed-bench-sync-r1", "speed-bare-sync-r2", "speed-bare-fast-r1"} <= names
    assert all(validate_record(r) for r in records) and {r["status"] for r in records} == {"ok", "oom"}
    assert all(r["step_timing"] == {"clock": "host", "cudnn_benchmark": None} for r in records if r["status"] == "ok")
    speed = next(s for s in steps if s["step"] == "speed")
    assert set(speed["ratios"]) == {"bench-sync", "bare-sync", "bare-fast"}
    assert speed["ratios"]["bare-fast"]["ratio_to_bare_fast"] == 1.0
    assert all(side["ratio_ci95"] is not None for side in speed["ratios"].values())
    report = validate("report", *outs.values())
    assert report.returncode == 0, report.stderr
    for heading in ("### Machine", "### Steps", "### Speed: bench vs bare loops", "Step timing (issue 23, item 4): no decision"):
        assert heading in report.stdout
    assert report.stdout.count("\n| 1 | A |") >= 5 and report.stdout.count("\n| 2 | C |") >= 2
    assert "| bare-fast |" in report.stdout
