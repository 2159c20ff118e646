"""RunSpec: the typed request from the command line to the rank (benchmarks/runspec.py), and the host's plan of a
run as a pure function of it (dispatch.planned), tested in-process: no benchrun or bench process is started."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import cli
from benchmarks.core.errors import UsageError
from benchmarks.runspec import RunSpec
from benchmarks.settings.options import COMM, OPTIONS, RUN
from runners import dispatch, launchers, runtimes

# One value of every option bench takes that is not its default, as a user would type it.
SAMPLE = {"framework": "tf", "model": "alexnet", "batch_size": "8", "image_size": "64", "precision": "amp",
          "data_format": "channels_last", "compile": "max-autotune", "num_warmup_batches": "0", "num_batches": "3",
          "repeats": "2", "step_timing": "events", "ceiling": "off", "display_every": "0", "max_batch_budget": "60.5",
          "max_batch_limit": "64", "timeout": "30", "device": "cpu", "num_threads": "2", "data_dir": "/d",
          "num_data_workers": "1", "synthetic_batches": "2", "seed": "3", "target_accuracy": "0.5",
          "eval_every": "100", "max_epochs": "2.5", "time_budget": "9", "base_lr": "0.02", "base_batch": "16",
          "lr_rule": "linear", "warmup_epochs": "0", "val_fraction": "0.2", "val_images": "50",
          "fashion_mnist_dir": "/f", "strategy": "ps", "num_ps": "1", "ps_placement": "greedy", "worker_port": "3000",
          "ps_port": "3100", "rendezvous_port": "3200", "output": "/r.jsonl", "mllog_org": "org",
          "mllog_platform": "p", "mllog_division": "closed", "tensorboard": "/tb", "trace": "/tr", "trace_steps": "2"}
COMM_SAMPLE = {"backend": "gloo", "ops": "allreduce", "min_bytes": "1K", "max_bytes": "1M", "step_factor": "4",
               "warmup_iters": "1", "iters": "2"}


def argv_of(values: dict) -> list[str]:
    out = []
    for name, text in values.items():
        out += [OPTIONS[name].flag] if OPTIONS[name].type is bool else [OPTIONS[name].flag, text]
    return out


def test_every_option_reads_as_bench_reads_it_and_renders_back_to_itself():
    flags = [o.dest for o in OPTIONS.values() if o.type is bool and RUN in o.commands]
    argv = [*argv_of(SAMPLE), *(OPTIONS[f].flag for f in flags)]
    spec = RunSpec.from_argv(argv)
    bench = cli.bench_parser(environ={}).parse_args(argv)  # bench's own reading of the same words
    assert spec.command == RUN and list(spec.given) == [*SAMPLE, *flags]  # in the order given
    assert all(spec.given[name] == getattr(bench, name) for name in spec.given)
    assert RunSpec.from_argv(spec.to_argv()) == spec
    assert set(OPTIONS) - set(SAMPLE) - set(flags) == set(COMM_SAMPLE)  # the sample covers the whole table
    comm = RunSpec.from_argv(["--framework", "torch", COMM, *argv_of(COMM_SAMPLE)])
    assert comm.command == COMM and comm.min_bytes == 1024 and comm.max_bytes == 1024**2
    assert comm.to_argv() == ["--framework", "torch", COMM, "--backend", "gloo", "--ops", "allreduce", "--min-bytes",
                              "1024", "--max-bytes", "1048576", "--step-factor", "4", "--warmup-iters", "1", "--iters", "2"]
    assert RunSpec.from_argv(comm.to_argv()) == comm


def test_an_option_not_given_has_the_table_s_default_never_the_host_s_environment(monkeypatch):
    monkeypatch.setenv("BENCH_FRAMEWORK", "tensorflow")  # the image's variable: benchrun's machine may set anything
    monkeypatch.setenv("DLBENCH_CEILING", "off")
    spec = RunSpec.from_argv(["--model", "alexnet", "--help", "--version"])  # help and version are bench's to answer
    assert spec.given == {"model": "alexnet"}
    assert (spec.framework, spec.ceiling, spec.batch_size, spec.mllog) == (None, OPTIONS["ceiling"].default, 64, False)
    with pytest.raises(AttributeError):
        getattr(spec, "no_such_option")


def test_replace_sets_once_keeps_a_given_option_in_place_and_leaves_out_none_and_false():
    spec = RunSpec.from_argv(["--timeout=9", "--model", "alexnet", "--mllog"])
    assert spec.replace(timeout=30.0, output="/r").to_argv() == [
        "--timeout", "30.0", "--model", "alexnet", "--mllog", "--output", "/r"]
    assert spec.replace(mllog=False, timeout=None).to_argv() == ["--model", "alexnet"]
    assert spec.to_argv() == ["--timeout", "9.0", "--model", "alexnet", "--mllog"]  # a spec is never changed
    with pytest.raises(KeyError, match="no option 'nonsense'"):
        spec.replace(nonsense=1)
    assert RunSpec.of(framework="torch", data_dir=None, xla=False, seed=1).to_argv() == ["--framework", "torch", "--seed", "1"]


def test_a_spec_travels_as_json_and_back():
    spec = RunSpec.from_argv(["--framework", "torch", "comm", "--ops", "allreduce", "--timeout", "5"])
    assert RunSpec.from_json(json.loads(json.dumps(spec.to_json()))) == spec
    request = dispatch.RunRequest(spec, runtime="docker", num_workers=2, launcher="local", env={"A": "b"})
    assert dispatch.RunRequest.from_json(json.loads(json.dumps(request.to_json()))) == request


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "two"], "bench's arguments: argument --batch-size: expected an integer, got 'two'"),
    (["--no-such-flag"], "bench's arguments: unrecognized arguments: --no-such-flag"),
])
def test_words_that_do_not_parse_are_one_line(argv, message):
    with pytest.raises(UsageError) as error:
        RunSpec.from_argv(argv)
    assert str(error.value) == message


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "--batch-size must be a positive integer, got 0"),
    (["--model", "nonet"], "unknown model 'nonet'"),
    (["--framework", "torch", "--strategy", "ps"], "--strategy ps is not available for torch (choices: "),
])
def test_check_applies_the_option_and_strategy_rules_without_the_machine(argv, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        RunSpec.from_argv(argv).check()
    RunSpec.from_argv(["--framework", "tf", "--strategy", "ps", "--data-dir", "/nowhere"]).check()  # no I/O


def test_the_host_s_plan_is_a_function_of_the_request(tmp_path):
    """--output into the results directory as the container sees it, the data mounted and given by its mounted
    path (in place of the host's), --timeout and --num-ps set by benchrun once: rendered at the launcher only."""
    data = tmp_path / "data"
    data.mkdir()
    asked = RunSpec.from_argv(["--framework", "tf", "--strategy", "ps", "--model", "alexnet"])
    request = dispatch.RunRequest(asked, runtime="docker", launcher="local", num_workers=2, num_ps=1, timeout_s=60.0,
                                  data_dir=str(data), run_id="abc")
    docker = runtimes.get("docker")
    plan, spec = dispatch.planned(request, docker, tmp_path, "img:1")
    assert spec.processes == 4 and spec.run.output == "/results/record.jsonl"
    assert spec.run.to_argv() == ["--framework", "tf", "--strategy", "ps", "--model", "alexnet", "--output",
                                  "/results/record.jsonl", "--data-dir", docker.data_dir(str(data)), "--num-ps", "1",
                                  "--timeout", "60.0"]
    assert launchers.get("local").command(spec)[-len(spec.run.to_argv()):] == spec.run.to_argv()
    assert request.spec == asked  # what was asked stays as asked
    mine = dispatch.RunRequest(RunSpec.from_argv(["--timeout", "5"]), runtime="local", timeout_s=60.0)
    assert dispatch.planned(mine, runtimes.get("local"), Path("/r"), None)[1].run.timeout == 5.0  # bench's own wins
    with pytest.raises(UsageError, match="give --num-ps to benchrun, not to bench"):
        dispatch.planned(dispatch.RunRequest(asked.replace(num_ps=1)), runtimes.get("local"), Path("/r"), None)


def test_benchrun_refuses_bench_s_bad_options_before_it_prepares_anything():
    """The same line bench would say, said by the host before an image is pulled, converted or started."""
    request = dispatch.RunRequest(RunSpec.from_argv(["--model", "nonet"]), runtime="apptainer", image="no/such:image")
    with pytest.raises(UsageError, match=r"^unknown model 'nonet' \(choices: "):
        dispatch.check(request, installed=False)


def test_benchrun_reads_bench_s_arguments_once(monkeypatch, capsys):
    """Planning a run used to re-parse bench's argv nine times; the RunSpec is read once, then handed on."""
    from benchmarks import runspec
    from runners.cli import main

    parses = []
    real = runspec.RunSpec.from_argv.__func__
    monkeypatch.setattr(runspec.RunSpec, "from_argv", classmethod(lambda cls, argv: parses.append(argv) or real(cls, argv)))
    argv = ["--framework", "tf", "--strategy", "ps", "--model", "alexnet", "--timeout", "9"]
    assert main(["run", "--runtime", "docker", "--launcher", "local", "-n", "2", "--num-ps", "1", "--dry-run",
                 "--", *argv]) == 0
    assert parses == [argv]
    assert capsys.readouterr().out.rstrip().endswith("--framework tf --strategy ps --model alexnet --timeout 9.0 "
                                                     "--output /results/record.jsonl --num-ps 1")
