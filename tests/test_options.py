"""The option table (benchmarks/settings/options.py): bench's parser, the run configuration, the record's choices,
`bench comm` and a sweep plan's options are derived from it and agree. In-process, no framework."""

import dataclasses
import importlib.util
import typing
from pathlib import Path

import pytest

from benchmarks import cli
from benchmarks.comm.cli import options_from
from benchmarks.core.errors import UsageError
from benchmarks.distributed import cluster, strategies
from benchmarks.distributed.world import RUN_TOKEN_ENV, run_token
from benchmarks.results import record
from benchmarks.runspec import RunSpec
from benchmarks.settings import options
from benchmarks.settings.config import BenchConfig, build_config
from benchmarks.settings.options import COMM, CONFIG_OPTIONS, OPTIONS, RUN
from runners import launchers
from runners.sweep import MATRIX_OPTIONS, BenchOptions, PlanError, parse_plan

ROOT = Path(__file__).resolve().parents[1]
PLAN = {"matrix": {"framework": "torch", "model": "alexnet", "batch_size": 2}}


def actions(parser) -> dict:
    return {a.dest: a for a in parser._actions if a.option_strings}


def comm_parser(parser):
    return next(a for a in parser._actions if a.dest == "command").choices["comm"]


def test_the_parser_holds_every_option_of_each_command_with_the_table_default():
    parser = cli.bench_parser(environ={})
    run, comm = actions(parser), actions(comm_parser(parser))
    assert {o.dest for o in options.of(RUN)} == set(run) - {"help", "version"}
    assert {o.dest for o in options.of(COMM)} == set(comm) - {"help"}
    for option in options.of(RUN):
        assert run[option.flag.lstrip("-").replace("-", "_")].default == option.default, option.dest
    defaults = vars(parser.parse_args(["comm"]))
    assert all(defaults[o.dest] == o.default for o in options.of(COMM)), defaults


def test_the_run_configuration_is_the_table_s_config_options():
    fields = {f.name: f for f in dataclasses.fields(BenchConfig)}
    assert [o.dest for o in CONFIG_OPTIONS] == [name for name in fields if name in OPTIONS]
    assert set(fields) - set(OPTIONS) == {"num_classes", "rendezvous_timeout"}  # derived by bench, not options
    assert all(fields[o.dest].default == o.default for o in CONFIG_OPTIONS if o.dest != "framework")
    config = cli.config_of(cli.bench_parser(environ={}).parse_args(["--framework", "tf", "--num-batches", "7"]),
                           installed_here=False)
    assert config.framework == "tensorflow" and config.num_batches == 7 and config.data_format == "channels_last"


def test_the_record_s_choices_are_the_table_s():
    hints = typing.get_type_hints(record.RunConfig)
    for option in CONFIG_OPTIONS:
        assert option.dest in record.RunConfig.model_fields
        if option.choices:
            literal = next(a for a in (hints[option.dest], *typing.get_args(hints[option.dest]))
                           if typing.get_origin(a) is typing.Literal)
            assert typing.get_args(literal) == option.choices, option.dest


def test_sweep_options_are_the_config_options_the_matrix_does_not_own():
    assert list(BenchOptions.model_fields) == [o.dest for o in CONFIG_OPTIONS if o.dest not in MATRIX_OPTIONS]
    given = {"image_size": 64, "xla": True, "compile": "max-autotune", "worker_port": 3000, "max_epochs": 5}
    args = RunSpec.of(**given).to_argv()
    parsed = cli.bench_parser(environ={}).parse_args(args)  # bench reads back what the sweep writes
    assert {k: getattr(parsed, k) for k in given} == given
    for key, bad, says in (("worker_port", 70000, "must be a port between 1 and 65471"),
                           ("num_warmup_batches", -1, "must be zero or more"),
                           ("precision", "fp8", "unknown value 'fp8'"),
                           ("val_fraction", 1.0, "must be between 0 and 1")):
        with pytest.raises(PlanError, match=f"bench.{key}: {says}"):
            parse_plan({**PLAN, "bench": {key: bad}}, "plan.yaml")
        with pytest.raises(UsageError, match=OPTIONS[key].flag):  # and bench refuses it by the same rule
            build_config(framework="torch", model="alexnet", installed_here=False, **{key: bad})


def test_defaults_and_the_ps_rule_are_written_once():
    sources = {p: p.read_text() for p in [*(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "runners").rglob("*.py")]}
    for port in ("2210", "2220", "2230"):
        assert [p.name for p, text in sources.items() if port in text] == ["cluster.py"], port  # distributed/cluster.py
    homes = [p.name for p, text in sources.items() if "needs {name('num_ps')}" in text or "needs --num-ps" in text]
    assert homes == ["base.py"]  # distributed/strategies/base.py
    assert [p.name for p, text in sources.items() if "def is_comm(argv" in text or "FLAG_OPTIONS" in text] == []


def test_ports_not_given_come_from_the_run_token_in_training_and_comm(monkeypatch):
    """Every rank builds its config from the same token, so all agree on the ports without being told."""
    monkeypatch.setenv(RUN_TOKEN_ENV, "run-a")
    derived = cluster.run_ports({}, "run-a")
    config = build_config(framework="torch", model="alexnet", installed_here=False)
    assert {name: getattr(config, name) for name in derived} == derived != cluster.run_ports({}, None)
    comm = options_from(cli.bench_parser(environ={}).parse_args(["--framework", "torch", "comm"]), installed_here=False)
    assert {name: getattr(comm, name) for name in derived} == derived
    given = build_config(framework="torch", model="alexnet", rendezvous_port=4000, installed_here=False)
    assert (given.rendezvous_port, given.worker_port, given.ps_port) == (4000, 4010, 4020)


@pytest.mark.parametrize("argv", [
    ["--debug", "comm"], ["--strict-data", "comm"], ["--json", "comm"], ["--framework", "torch", "comm"],
    ["comm", "--framework", "torch"], ["--model", "alexnet", "--timeout", "5", "comm", "--iters", "3"],
])
def test_comm_is_a_subcommand_wherever_it_stands(argv):
    assert cli.bench_parser(environ={}).parse_args(argv).command == "comm"


def test_an_option_value_named_comm_is_not_the_subcommand(capsys):
    assert cli.bench_parser(environ={}).parse_args(["--model", "comm"]).command is None
    assert cli.main(["--framework", "torch", "--model", "comm"]) == 2
    assert "unknown model 'comm'" in capsys.readouterr().err


def test_debug_comm_help_is_comm_s_help(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--debug", "comm", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: bench comm") and "--max-bytes" in out and "--batch-size" not in out


def test_training_options_given_to_comm_are_refused(capsys):
    assert cli.main(["--strict-data", "comm", "--framework", "torch"]) == 2
    assert capsys.readouterr().err == "bench: error: --strict-data applies to training runs, not to `bench comm`\n"


def test_shared_options_keep_their_value_on_either_side_of_comm():
    parse = cli.bench_parser(environ={"BENCH_FRAMEWORK": "torch"}).parse_args
    assert parse(["--framework", "tf", "--num-ps", "1", "comm", "--strategy", "ps"]).framework == "tf"
    assert parse(["comm", "--framework", "tf"]).framework == "tf" and parse(["comm"]).framework == "torch"
    if importlib.util.find_spec("tensorflow") is None:  # options_from asks whether it is installed
        pytest.skip("tensorflow is not installed")
    resolved = options_from(parse(["--framework", "tf", "--num-ps", "1", "--worker-port", "3000", "comm", "--strategy",
                                   "ps", "--iters", "3"]))
    assert (resolved.framework, resolved.backend, resolved.num_ps, resolved.worker_port, resolved.iters,
            resolved.ps_port) == ("tensorflow", "ps", 1, 3000, 3, cluster.run_ports({}, run_token())["ps_port"])


def test_each_strategy_checks_its_ps_count():
    assert strategies.get("ps").num_ps_problem(0) == "--strategy ps needs --num-ps 1 or more"
    assert strategies.get("ddp").num_ps_problem(2) == "--num-ps 2 needs --strategy ps"
    assert strategies.get("none").num_ps_problem(-1) == "--num-ps must be 0 or more, got -1"
    assert strategies.get("ps").num_ps_problem(1, name=str) is None
    assert strategies.get("horovod").num_ps_problem(1, name=str) == "num_ps 1 needs strategy ps"
    with pytest.raises(UsageError, match="--strategy ps needs --num-ps 1 or more"):
        build_config(framework="tf", model="alexnet", strategy="ps", installed_here=False)


def test_the_host_reads_bench_s_arguments_with_bench_s_parser(monkeypatch):
    monkeypatch.setenv("BENCH_FRAMEWORK", "torch")  # the host's: the image sets its own
    assert RunSpec.from_argv(["--help", "--model", "alexnet"]).framework is None
    asked = RunSpec.from_argv(["--framework", "tf", "comm", "--strategy", "ps", "--timeout=9"])
    spec = launchers.launch_spec(["bench"], asked, 2, 1, 30.0)
    assert spec.processes == 4  # --timeout=9 given: kept where it was, not replaced by benchrun's 30
    assert spec.run.to_argv() == ["--framework", "tf", "--strategy", "ps", "--timeout", "9.0", "--num-ps", "1", "comm"]
    with pytest.raises(UsageError, match="bench's arguments: argument --batch-size: expected an integer"):
        RunSpec.from_argv(["--batch-size", "two"])


def test_help_text_fills_defaults_and_choices_from_the_table():
    text = cli.bench_parser(environ={}).format_help()
    assert "per worker (default: 64)" in text and "round-robin, greedy" in text and "95% t-interval" in text
    assert "%(" not in text


def test_an_empty_environment_default_is_no_value():
    """The Horovod images set BENCH_FRAMEWORK= (no default framework): bench must ask for --framework
    in its own words, not refuse the framework ''."""
    framework = OPTIONS["framework"]
    assert framework.default_from({"BENCH_FRAMEWORK": ""}) is None
    assert framework.default_from({"BENCH_FRAMEWORK": "torch"}) == "torch"


def test_each_framework_fact_is_stated_once_and_names_real_options():
    """benchmarks.core.framework_specs is where --framework's choices, aliases, layouts, own flags, backend and
    image come from: each entry names options, layouts and a backend that exist."""
    from benchmarks.core import framework_specs
    from benchmarks.frameworks import BACKENDS
    from benchmarks.settings.options import OPTIONS
    from runners.dispatch import RunRequest, default_image

    specs = framework_specs.FRAMEWORKS
    assert OPTIONS["framework"].choices == tuple(specs) and list(BACKENDS) == list(specs)
    layouts = OPTIONS["data_format"].choices
    for name, spec in specs.items():
        assert spec.data_format in layouts and set(spec.cpu_data_formats) <= set(layouts)
        assert all(flag in OPTIONS for flag in spec.own_flags)
        assert spec.step_timings[0] == OPTIONS["step_timing"].default
        assert set(spec.step_timings) <= set(OPTIONS["step_timing"].choices)
        assert BACKENDS[name] == spec.backend and spec.backend.startswith("benchmarks.frameworks.")
        for alias in (name, *spec.aliases):
            assert OPTIONS["framework"].resolved(alias) == name
            assert default_image(RunRequest(RunSpec.from_argv(["--framework", alias]))) == spec.image
    assert not set(framework_specs.ALIASES) & set(specs)
    owned = [flag for spec in specs.values() for flag in spec.own_flags]
    assert len(owned) == len(set(owned))  # a framework-only option has one owner


def test_an_environment_default_is_not_a_flag_given_to_comm(monkeypatch):
    """A training option whose default comes from the environment (an exported DLBENCH_CEILING or
    MLPERF_SUBMISSION_ORG) is not refused as given to `bench comm`; the flag itself still is."""
    from benchmarks import cli as bench_cli
    from benchmarks.settings.options import given

    environ = {"DLBENCH_CEILING": "off", "MLPERF_SUBMISSION_ORG": "site"}
    parser = bench_cli.bench_parser(environ)
    assert given(parser.parse_args(["comm"]), "run", environ) == []
    assert given(parser.parse_args(["--ceiling", "measure", "comm"]), "run", environ) == ["--ceiling"]
