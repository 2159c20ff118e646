"""dlbench as ReFrame regression tests: training throughput, runtime overhead, communication.

    reframe -C reframe-checks/site/settings.py -c reframe-checks/dlbench_checks.py -r --performance-report

Every test runs `benchrun` (or `bench` inside a container that ReFrame itself starts, through
its `container_platform`, for the runtimes ReFrame has a platform for), reads the record the run
printed, and takes its sanity and its performance variables from that record (README, "In your
ReFrame suite"; every variable with its unit: docs/reframe.md). The axes come from dlbench
itself (benchmarks.settings.config, the strategies, runners.runtimes): a new model, strategy or runtime
there is a new test here. What a site sets: its partitions, their features and `extras`
(site/settings.py) and its references (site/references.yaml, or DLBENCH_REFERENCES=FILE).
"""

import os
import shlex
import sys

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import parameter, run_after, run_before, sanity_function, variable

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import dlbench_rfm as lib  # noqa: E402 - puts the dlbench checkout on sys.path

from benchmarks.distributed import strategies  # noqa: E402 - after sys.path; dlbench's own axes (no framework imported)
from benchmarks.settings.config import FRAMEWORKS, MODELS  # noqa: E402 - dlbench's own axes (no framework imported)
from runners import runtimes  # noqa: E402 - once the checkout is on sys.path

RANKS = (1, 2)
# the site's references, checked whole before any test is made: a wrong one stops the run here
REFERENCES_FILE = os.environ.get('DLBENCH_REFERENCES') or os.path.join(HERE, 'site', 'references.yaml')
try:
    REFERENCES = lib.load_references(REFERENCES_FILE)
except lib.ReferencesError as error:
    print(f'dlbench: error: {error}', file=sys.stderr, flush=True)
    raise SystemExit(lib.EXIT_REFERENCES)


class DlbenchBase(rfm.RunOnlyRegressionTest):
    """What every dlbench test shares: how dlbench is started, the record it prints, its references."""

    valid_prog_environs = ['*']
    #: how to start benchrun (a command line; default: `benchrun` on PATH)
    benchrun = variable(str, value='benchrun')
    #: bench's own options for every run (e.g. '--image-size 64 --num-batches 2'); empty: bench's defaults
    bench_options = variable(str, value='')
    #: False: every run through `benchrun --runtime`, also where ReFrame has a container platform (benchrun
    #: removes its containers also when the job is killed; ReFrame's `docker run --rm` only when it ends)
    reframe_platforms = variable(typ.Bool, value=True)
    kind = 'train'
    tags = {'dlbench'}

    def extra(self, name, default=None):
        """A partition's `extras` entry `dlbench_NAME` (site/settings.py)."""
        return self.current_partition.extras.get(f'dlbench_{name}', default)

    def records(self):
        """The records the run made: the one it printed (the last JSON line of its stdout)."""
        return [lib.last_record(os.path.join(self.stagedir, str(self.stdout.evaluate())))]

    def expected_records(self):
        return 1

    def values(self, records):
        """{performance variable: value} from the records (lib.PERF_VARIABLES names them)."""
        raise NotImplementedError

    @run_after('init')
    def set_references(self):
        self.reference = lib.references(REFERENCES, self.selector())

    def selector(self):
        """What a references entry's `match` is compared with: the test's name and its parameters."""
        return {'test': type(self).__name__,
                **{key: getattr(self, key) for key in lib.MATCH_KEYS if key != 'test' and hasattr(self, key)}}

    @sanity_function
    def records_are_sound(self):
        records = self.records()
        return sn.all([lib.sane(record, self.kind) for record in records] +
                      [sn.assert_eq(len(records), self.expected_records(), msg='{0} records, expected {1}')])

    @run_before('performance')
    def set_perf_variables(self):
        """perf_variables from the records (units: lib.PERF_VARIABLES); values absent from the record (null
        memory views on a CPU) are left out, never reported as 0."""
        self.perf_variables = {name: sn.make_performance_function(sn.defer(value), lib.PERF_VARIABLES[name][0])
                               for name, value in self.values(self.records()).items() if value is not None}


@rfm.simple_test
class DlbenchTrain(DlbenchBase):
    """One training benchmark: framework x model x strategy x ranks x runtime."""

    framework = parameter(FRAMEWORKS)
    model = parameter(list(MODELS))
    strategy = parameter(list(strategies.NAMES))
    ranks = parameter(RANKS)
    runtime = parameter(lib.site_runtimes(runtimes.RUNTIMES, runtimes.BARE))

    @run_after('init')
    def keep_meaningful(self):
        strategy = strategies.get(self.strategy)
        self.skip_if(not strategy.supports(self.framework), f'{self.framework} has no strategy {self.strategy}')
        self.skip_if((self.ranks > 1) != (self.strategy != strategies.DEFAULT),
                     'one rank without a strategy, several with one')
        # a container runtime runs where the partition lists it among its features
        features = [] if self.runtime == runtimes.BARE else [f'+{self.runtime}']
        features += [f'+{feature}' for feature in lib.STRATEGY_FEATURES.get(self.strategy, ())]
        self.valid_systems = [' '.join(features) or '*']
        self.num_tasks = strategy.processes(self.ranks, lib.NUM_PS if strategy.uses_ps else 0)

    def bench_args(self):
        """bench's arguments (the parameter servers are benchrun's --num-ps: it starts their processes)."""
        return ['--framework', self.framework, '--model', self.model, '--strategy', self.strategy,
                *shlex.split(self.bench_options)]

    @run_before('run')
    def command(self):
        platform = lib.PLATFORMS.get(self.runtime)
        image = self.extra('images', {}).get(self.runtime, {}).get(self.framework)  # None: dlbench's default
        if platform and self.ranks == 1 and self.reframe_platforms and \
                platform in self.current_partition.container_environs:
            # ReFrame starts the container itself (the partition's container_platforms entry)
            self.container_platform = platform
            self.container_platform.image = image or lib.default_image(self.framework)
            self.container_platform.pull_image = False
            self.container_platform.options = lib.PLATFORM_OPTIONS.get(self.runtime, []) + \
                self.extra('container_options', {}).get(self.runtime, [])
            self.container_platform.command = shlex.join(['bench', *self.bench_args(), '--json'])
            return
        launcher = self.extra('launcher', 'local') if self.ranks > 1 else None
        self.executable = self.benchrun
        self.executable_opts = ['run', '--runtime', self.runtime] + (['--image', image] if image else []) + \
            (['--launcher', launcher, '-n', str(self.ranks)] if launcher else []) + \
            (['--num-ps', str(lib.NUM_PS)] if strategies.get(self.strategy).uses_ps else []) + \
            ['--', *self.bench_args()]
        self.executable_opts = [shlex.quote(a) for a in self.executable_opts]

    def values(self, records):
        return lib.train_values(records[0])


@rfm.simple_test
class DlbenchRuntimeOverhead(DlbenchBase):
    """A container runtime against the bare host, round by round in random orders (`benchrun compare-runtimes`):
    the job's output ends with the verdict table; the ratio and its interval are performance variables."""

    runtime = parameter(lib.site_runtimes(runtimes.RUNTIMES, runtimes.BARE)[1:])
    framework = parameter(FRAMEWORKS)
    #: the model compared (any of dlbench's)
    model = variable(str, value='resnet50')
    #: rounds (each runtime once per round)
    rounds = variable(int, value=3)

    @run_after('init')
    def on_partitions_with_the_runtime(self):
        self.valid_systems = [f'+{self.runtime}']

    @run_before('run')
    def command(self):
        self.executable = self.benchrun
        self.executable_opts = [shlex.quote(a) for a in [
            'compare-runtimes', '--runtimes', f'{runtimes.BARE},{self.runtime}', '--rounds', str(self.rounds),
            '--out', 'compare', '--', '--framework', self.framework, '--model', self.model,
            *shlex.split(self.bench_options)]]

    def records(self):
        return lib.all_records(os.path.join(self.stagedir, 'compare', 'records.jsonl'))

    def expected_records(self):
        return 2 * self.rounds  # each runtime once per round

    def values(self, records):
        return {'runtime_overhead': lib.overhead(records, runtimes.BARE, self.runtime),
                **lib.ratio(os.path.join(self.stagedir, 'compare', 'verdicts.csv'), runtimes.BARE, self.runtime)}


@rfm.simple_test
class DlbenchComm(DlbenchBase):
    """`bench comm`: all-reduce bus bandwidth and point-to-point latency between ranks."""

    framework = parameter(FRAMEWORKS)
    ranks = variable(int, value=2)
    #: bench comm's own options (sizes: '--max-bytes 64M')
    comm_options = variable(str, value='')
    kind = 'comm'

    @run_after('init')
    def everywhere(self):
        self.valid_systems = ['*']

    @run_before('run')
    def command(self):
        self.num_tasks = self.ranks
        self.executable = self.benchrun
        self.executable_opts = [shlex.quote(a) for a in [
            'launch', '--launcher', self.extra('launcher', 'local'), '-n', str(self.ranks), '--',
            '--framework', self.framework, 'comm', '--json', *shlex.split(self.comm_options)]]

    def values(self, records):
        return lib.comm_values(records[0])
