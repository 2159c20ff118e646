"""Sweep plans: the YAML schema, its validation, its size, the matrix product (lazily), skip rules,
config hashes, and each point's check before anything runs.

Schema and rules: docs/sweeps.md. Nothing here runs anything; runners/commands/sweep.py does.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    create_model,
)

from benchmarks.core.errors import UsageError, choices
from benchmarks.distributed import strategies
from benchmarks.runspec import RunSpec
from benchmarks.settings.options import CONFIG_OPTIONS, OPTIONS, POSITIVE_INT, Check, Option

from . import dispatch, launchers, runtimes

AXES = ("framework", "model", "batch_size", "ranks", "num_ps", "strategy", "data", "runtime", "image")
# Plans over this many combinations are refused unless --max-points says otherwise: each point is a whole
# bench run (seconds to hours), so 10,000 is days of machine time already, and a plan far larger is a
# mistake (an axis pasted as a range); checking each point before anything runs costs ~1 ms, seconds here.
MAX_POINTS = 10_000
# A plan file's own size: a real one is kilobytes (four axes of 1,000 values: 16 KB; PyYAML's safe_load reads
# ~100 KB/s), while YAML's aliases can make a 1 KB file hold 10^9 values that validating would never finish.
MAX_PLAN_BYTES = 256 << 10
MAX_PLAN_VALUES = 1_000_000
SHOWN_PROBLEMS = 20  # a bad plan's lines, at most, and one saying how many more


class PlanError(Exception):
    """A bad plan file: one line per problem, each `PATH: WHERE: WHAT`."""

    def __init__(self, lines: list[str]):
        super().__init__("\n".join(lines))
        self.lines = lines


# --- value checks: each raises ValueError with the message shown after "WHERE: " ---------------

def _obeys(check: Check):
    def test(value):
        if not check.test(value):
            raise ValueError(check.says)
        return value

    return test


def _one_of(valid, aliases: dict | None = None):
    def check(value: str) -> str:
        value = (aliases or {}).get(value, value)
        if value not in valid:
            raise ValueError(f"unknown value {value!r} (choices: {choices(valid)})")
        return value

    return check


def _a_number(what: str = "a number"):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"must be {what}, got {value!r}")
        return value

    return check


def _nonempty_str(value: str) -> str:
    if not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def _axis(values: list) -> list:
    if not values:
        raise ValueError("must list at least one value")
    for index, value in enumerate(values):
        if value in values[:index]:
            raise ValueError(f"lists {value!r} twice")
    return values


def _listify(value):  # `model: resnet50` is the one-value list [resnet50]
    return value if isinstance(value, list) else [value]


Name = Annotated[str, Field(strict=True), AfterValidator(_nonempty_str)]


def Axis(item):  # noqa: N802 - a type factory
    return Annotated[list[item], BeforeValidator(_listify), AfterValidator(_axis)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _value_type(option: Option):
    """A plan's value of a bench option: its type, strictly, then the option's own choices and rule."""
    base = {bool: StrictBool, int: StrictInt, float: Annotated[float, BeforeValidator(_a_number())]}.get(option.type, Name)
    rules = [AfterValidator(_one_of(option.choices, option.aliases))] if option.choices else []
    rules += [AfterValidator(_obeys(option.check))] if option.check else []
    return Annotated[(base, *rules)] if rules else base


class _Matrix(_Model):
    framework: Axis(_value_type(OPTIONS["framework"]))
    model: Axis(_value_type(OPTIONS["model"]))
    batch_size: Axis(_value_type(OPTIONS["batch_size"]))
    ranks: Axis(Annotated[StrictInt, AfterValidator(_obeys(POSITIVE_INT))]) = [1]
    num_ps: Axis(_value_type(OPTIONS["num_ps"])) = [OPTIONS["num_ps"].default]
    strategy: Axis(_value_type(OPTIONS["strategy"])) = [OPTIONS["strategy"].default]
    data: Axis(Name) = ["synthetic"]
    runtime: Axis(Name) = [runtimes.DEFAULT]
    image: Axis(Optional[Name]) = [None]

    def varied(self) -> dict[str, list]:
        """The bench options given as axes (seed, lr_rule, ...): each point gets one value of each as a bench option."""
        return {name: values for name, values in self.model_dump().items() if name not in AXES and values is not None}


MATRIX_OPTIONS = ("framework", "model", "batch_size", "strategy", "num_ps", "data_dir")  # the matrix's own axes
BENCH_AXES = [o for o in CONFIG_OPTIONS if o.dest not in MATRIX_OPTIONS]  # bench options: a `bench:` value or an axis

# Any bench option may also be an axis (`seed: [1, 2, 3]`); the nine above are the matrix's own.
Matrix = create_model("Matrix", __base__=_Matrix, **{o.dest: (Optional[Axis(_value_type(o))], None) for o in BENCH_AXES})


class _BenchOptions(_Model):
    def given(self) -> dict:
        return {k: v for k, v in self.model_dump().items() if v is not None}


# bench flags given to every run: the run configuration's options the matrix does not own.
BenchOptions = create_model("BenchOptions", __base__=_BenchOptions, **{
    o.dest: (Optional[_value_type(o)], None) for o in BENCH_AXES})


def _positive_number(value: Union[int, float]) -> float:
    if value <= 0:
        raise ValueError("must be a positive number of seconds")
    return float(value)


class Plan(_Model):
    matrix: Matrix
    bench: BenchOptions = BenchOptions()
    launcher: Annotated[Name, AfterValidator(_one_of(tuple(launchers.LAUNCHERS)))] = "local"
    launcher_args: list[Annotated[str, Field(strict=True)]] = []
    timeout: Optional[Annotated[float, BeforeValidator(_a_number("a positive number of seconds")),
                                AfterValidator(_positive_number)]] = None


# --- loading -----------------------------------------------------------------------------------

def _where(loc: tuple) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part).startswith(("function-", "lax-", "json-")):
            continue
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


_MODELS_BY_KEY = {(): Plan, ("matrix",): Matrix, ("bench",): BenchOptions}
# pydantic error type -> what the value must be
MUST_BE = {**dict.fromkeys(("int_type", "int_parsing", "int_from_float"), "an integer"), "string_type": "a string",
           **dict.fromkeys(("bool_type", "bool_parsing"), "true or false"), "list_type": "a list",
           **dict.fromkeys(("model_type", "model_attributes_type", "dict_type"), "a mapping of keys to values"),
           **dict.fromkeys(("float_type", "float_parsing"), "a number")}


def _message(error: dict) -> str:
    kind = error["type"]
    loc = tuple(p for p in error["loc"] if isinstance(p, int) or not str(p).startswith(("function-", "constrained-")))
    if kind == "extra_forbidden":
        model = _MODELS_BY_KEY.get(tuple(loc[:-1]))
        valid = f" (choices: {choices(model.model_fields)})" if model else ""
        return f"{_where(loc)}: unknown key{valid}"
    if kind == "missing":
        return f"{_where(loc)}: required key missing"
    if kind == "value_error":
        return f"{_where(loc)}: {error['msg'].removeprefix('Value error, ')}"
    if kind in MUST_BE:
        return f"{_where(loc)}: must be {MUST_BE[kind]}, got {_shown(error['input'])}"
    return f"{_where(loc)}: {error['msg']}"


def _shown(value: Any, width: int = 80) -> str:
    """A value in an error line, cut to `width` characters: the line stays one readable line."""
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


def _values_over(data: Any, budget: int) -> bool:
    """Whether the loaded YAML holds more than `budget` values, YAML aliases counted as often as they are
    used; stops as soon as it knows, so a file built to expand past memory costs `budget` steps."""
    stack, seen = [data], 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > budget:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def parse_plan(data: Any, label: str) -> Plan:
    if not isinstance(data, dict):
        raise PlanError([f"{label}: must be a YAML mapping with a 'matrix' key, got {type(data).__name__}"])
    try:
        plan = Plan.model_validate(data)
    except ValidationError as error:
        lines, seen = [], set()
        for item in error.errors():
            line = f"{label}: {_message(item)}"
            if line not in seen:  # unions report one problem once per branch
                seen.add(line)
                lines.append(line)
        if len(lines) > SHOWN_PROBLEMS:  # a plan of 10,000 bad values is not 10,000 lines
            lines[SHOWN_PROBLEMS:] = [f"{label}: ... and {len(lines) - SHOWN_PROBLEMS:,} more problems"]
        raise PlanError(lines) from None
    both = [name for name in plan.matrix.varied() if name in plan.bench.given()]
    if both:
        raise PlanError([f"{label}: matrix.{name}: also given in bench (one value: bench; several: matrix)" for name in both])
    return plan


def load_plan(path: str | os.PathLike) -> Plan:
    import yaml

    label = str(path)
    try:
        size = Path(path).stat().st_size
        if size > MAX_PLAN_BYTES:
            raise PlanError([f"{label}: {size:,} bytes, over {MAX_PLAN_BYTES:,}: a plan lists values per axis, "
                             "kilobytes"])
        text = Path(path).read_text()
    except FileNotFoundError:
        raise PlanError([f"{label}: no such file"]) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as error:
        raise PlanError([f"{label}: cannot read: {error.__class__.__name__}"]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f"line {mark.line + 1}: " if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise PlanError([f"{label}: not valid YAML: {at}{problem}"]) from None
    if _values_over(data, MAX_PLAN_VALUES):
        raise PlanError([f"{label}: holds over {MAX_PLAN_VALUES:,} values once its YAML aliases are expanded "
                         "(anchors used within anchors?): a plan lists values per axis, thousands at most"])
    return parse_plan(data, label)


# --- the product -------------------------------------------------------------------------------

# the axes a point's label names where not at their default: axis -> (name in the label, default)
LABELLED = {"strategy": ("strategy", strategies.DEFAULT), "num_ps": ("ps", 0), "data": ("data", "synthetic"),
            "runtime": ("runtime", runtimes.DEFAULT), "image": ("image", None)}


@dataclass
class Point:
    values: dict  # one value per axis, in AXES order
    bench: dict  # the plan's bench options that were given
    launcher: str | None  # None: one process, no launcher
    launcher_args: list[str] = field(default_factory=list)
    varied: tuple[str, ...] = ()  # the bench options the plan's matrix varies: named in the label

    @property
    def processes(self) -> int:
        return strategies.get(self.values["strategy"]).processes(self.values["ranks"], self.values["num_ps"])

    def identity(self) -> dict:
        """What the hash covers: the matrix values, the bench options, and the launcher when one is used."""
        ident = {"point": self.values, "bench": self.bench}
        if self.launcher is not None:
            ident["launcher"] = {"name": self.launcher, "args": self.launcher_args}
        return ident

    @property
    def config_hash(self) -> str:
        return config_hash(self.identity())

    def label(self) -> str:
        v = self.values
        parts = [v["framework"], v["model"], f"bs={v['batch_size']}", f"ranks={v['ranks']}"]
        parts += [f"{name}={v[axis]}" for axis, (name, default) in LABELLED.items() if v[axis] != default]
        parts += [f"{name}={self.bench[name]}" for name in self.varied]
        return " ".join(parts)

    def spec(self) -> RunSpec:
        """What bench is asked at this point: the matrix's options, then the plan's `bench:` ones."""
        v = self.values  # num_ps goes to the launcher (runners.launchers.launch_spec), which passes it on
        return RunSpec.of(framework=v["framework"], model=v["model"], batch_size=v["batch_size"], strategy=v["strategy"],
                          data_dir=None if v["data"] == "synthetic" else v["data"], **self.bench)


def config_hash(identity: dict) -> str:
    """sha256 of the canonical JSON (sorted keys, no spaces) of a point's identity; 16 hex digits."""
    canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def skip_reason(values: dict) -> str | None:
    """Why a combination is not run (a rule, not an error), or None to run it."""
    framework, strategy = values["framework"], strategies.get(values["strategy"])
    if not strategy.supports(framework):
        return f"strategy {strategy.name} is for {choices(strategy.frameworks)} only"
    return strategy.num_ps_problem(values["num_ps"], name=str)


def _runtime_images(plan: Plan) -> int:
    """Runtime x image pairs: a runtime without image (local) runs once, whatever the image list says."""
    return sum(len(plan.matrix.image) if runtimes.uses_image(name) else 1 for name in plan.matrix.runtime)


def _loops(plan: Plan) -> dict[str, list]:
    """Every axis with its values, in plan order: the matrix's own, then the bench options given as axes."""
    return {**{axis: getattr(plan.matrix, axis) for axis in AXES}, **plan.matrix.varied()}


def size(plan: Plan) -> int:
    """How many combinations the plan holds (run or skipped by rule), from its axes' lengths alone:
    known before a single point is built, so a plan of 10^12 points costs no more than one of 10."""
    others = [len(values) for axis, values in _loops(plan).items() if axis not in ("runtime", "image")]
    return math.prod(others) * _runtime_images(plan)


def factors(plan: Plan) -> list[tuple[str, int]]:
    """The axes that multiply the count (more than one value) with their sizes, in plan order: what makes
    a plan large."""
    out = []
    for axis, values in _loops(plan).items():
        if axis == "runtime":
            m = plan.matrix
            name = "runtime" if len(m.image) == 1 else "image" if len(m.runtime) == 1 else "runtime x image"
            out.append((name, _runtime_images(plan)))
        elif axis != "image":
            out.append((axis, len(values)))
    return [(axis, n) for axis, n in out if n > 1]


def check_size(plan: Plan, label: str, limit: int = MAX_POINTS) -> int:
    """The plan's size, or a one-line PlanError naming it and the axes that make it when it is over `limit`."""
    total = size(plan)
    if total > limit:
        made_of = " x ".join(f"{axis} {n:,}" for axis, n in factors(plan))
        line = (f"{label}: expands to {total:,} points ({made_of}), over --max-points {limit:,}: "
                "split the plan, or give --max-points N to take it as it is")
        raise PlanError([line])
    return total


def combinations(plan: Plan) -> Iterator[tuple[Point, str | None]]:
    """Every combination in plan order, one at a time, with why it is skipped by rule (None: it runs).

    Lazy, so memory stays flat whatever the count. The image axis applies to runtimes that use an
    image only: `local` runs on the host, once, with image null; its copies for the other images are
    passed over as they come (axis values are distinct, so they are the product's only duplicates),
    so no set of the points seen grows either.
    """
    m = plan.matrix
    varied = m.varied()
    given = plan.bench.given()
    for *axes, options_given in itertools.product(*(getattr(m, axis) for axis in AXES), itertools.product(*varied.values())):
        values = dict(zip(AXES, axes))
        if not runtimes.uses_image(values["runtime"]):
            if values["image"] != m.image[0]:
                continue
            values["image"] = None
        bench = {**given, **dict(zip(varied, options_given))}
        multi = strategies.get(values["strategy"]).processes(values["ranks"], values["num_ps"]) > 1
        point = Point(values, bench, plan.launcher if multi else None, list(plan.launcher_args) if multi else [],
                      tuple(varied))
        yield point, skip_reason(values)


def expand(plan: Plan) -> tuple[list[Point], list[tuple[Point, str]]]:
    """The Cartesian product in plan order, as lists: (points to run, [(point, why skipped)]).
    For plans checked against a limit (check_size): the lists hold every point."""
    run, skipped = [], []
    for point, reason in combinations(plan):
        if reason:
            skipped.append((point, reason))
        else:
            run.append(point)
    return run, skipped


# --- checks before anything runs ---------------------------------------------------------------

def request_for(point: Point, timeout_s: float | None) -> dispatch.RunRequest:
    """How the point runs, as `benchrun run` would run it."""
    v = point.values
    return dispatch.RunRequest(
        spec=point.spec(),
        runtime=v["runtime"],
        image=v["image"],
        launcher=point.launcher,
        num_workers=v["ranks"],
        num_ps=v["num_ps"],
        timeout_s=timeout_s,
        launcher_args=list(point.launcher_args),
    )


def check_point(point: Point, request: dispatch.RunRequest, label: str, scratch: str | None = None) -> str | None:
    """The one-line reason this point cannot run as given, or None. Uses bench's own validation.
    `scratch`: an empty directory to plan the run in (dispatch.dry_run_text)."""
    v = point.values
    try:  # as bench will resolve it, with the parameter servers the launch gives it
        request.spec.replace(num_ps=v["num_ps"] or None).config(installed_here=False)
        if not runtimes.uses_image(v["runtime"]):  # a container image brings its own framework
            _require_installed(v["framework"])
    except UsageError as error:
        return f"{label}: point [{point.label()}]: {error}"
    try:
        dispatch.dry_run_text(request, scratch=scratch)  # planned as it would run (mounts checked); nothing written
    except UsageError as error:
        return f"{label}: matrix.runtime: {str(error).splitlines()[0]}"
    if point.launcher is not None and not launchers.get(point.launcher).available():
        binary = launchers.get(point.launcher).binary
        return f"{label}: launcher: {point.launcher!r} needs {binary!r}, which is not on PATH"
    return None


@functools.cache
def _require_installed(framework: str) -> None:
    """benchmarks.settings.config.require_installed, asked once per framework: it looks for modules on the path
    (a third of a point's check), and a plan of thousands of points asks the same question each time."""
    from benchmarks.settings.config import require_installed

    require_installed(framework)
