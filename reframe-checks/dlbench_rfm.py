"""What dlbench_checks.py asks of a record, and the site's references (no ReFrame test in here).

Every performance variable, its unit and where it comes from is PERF_VARIABLES, and nowhere
else: the checks report these, a references file may name only these, with these units.
"""

import json
import os
import sys

import reframe.utility.sanity as sn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the dlbench checkout these checks ship in
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.core.framework_specs import spec_of  # noqa: E402 - once the checkout is on sys.path


def default_image(framework: str) -> str:
    """The framework's image, as benchrun picks it."""
    return spec_of(framework).image


MiB = 1024 * 1024
EXIT_REFERENCES = 2  # the references file is wrong: `dlbench: error: ...` on stderr, no test run
NUM_PS = 1  # parameter servers of a `ps` test

# name: (unit, where it comes from)
PERF_VARIABLES = {
    'images_per_sec': ('img/s', 'throughput.images_per_sec: images/sec over every rank'),
    'images_per_sec_per_rank': ('img/s', 'throughput.images_per_sec / world.workers'),
    'step_time_p90': ('s', 'step_time_s.p90: 90th percentile of the timed steps, pooled over repeats'),
    'host_rss_peak': ('MiB', 'memory.host_rss_peak_bytes: peak resident set of the training process'),
    'allocator_peak': ('MiB', "memory.allocator_peak_bytes: the framework allocator's peak (GPU runs)"),
    'reserved_peak': ('MiB', "memory.reserved_peak_bytes: the allocator's reserved peak (torch on GPU)"),
    'device_peak': ('MiB', 'memory.device_peak_bytes: device memory in use at its peak, NVML (GPU runs)'),
    'runtime_overhead': ('%', '(local - runtime) / local images/sec, means over the rounds of compare-runtimes'),
    'runtime_ratio': ('x', "runtime / local images/sec: the verdict's ratio, paired by round (verdicts.csv)"),
    'runtime_ratio_ci_low': ('x', "the 95% interval's low end of runtime_ratio"),
    'runtime_ratio_ci_high': ('x', "the 95% interval's high end of runtime_ratio"),
    'busbw': ('GB/s', 'bench comm: the largest all-reduce bus bandwidth over message sizes'),
    'pingpong_latency': ('us', 'bench comm: the smallest one-way point-to-point latency over message sizes'),
}
MEMORY_VIEWS = {'host_rss_peak': 'host_rss_peak_bytes', 'allocator_peak': 'allocator_peak_bytes',
                'reserved_peak': 'reserved_peak_bytes', 'device_peak': 'device_peak_bytes'}

# strategies that run only where a partition lists these features (Horovod: its own images, or a site's build)
STRATEGY_FEATURES = {'horovod': ('horovod',)}
# runtimes ReFrame starts itself (its container_platform), one rank; the others go through benchrun.
# ReFrame's `Shifter` writes Shifter-NG's command line (`shifter run --mount=...`, `shifter pull`): dlbench's
# shifter-ng. NERSC's Shifter (dlbench's `shifter`: `shifter --image=... --volume=...`) has no `run` verb.
PLATFORMS = {'docker': 'Docker', 'apptainer': 'Apptainer', 'singularity': 'Singularity', 'sarus': 'Sarus',
             'shifter-ng': 'Shifter'}
# the dlbench images' entrypoint is `bench`: Docker gets the command line whole, as the others do
PLATFORM_OPTIONS = {'docker': ["--entrypoint=''", '--network=host']}

SCHEMAS = {'train': os.path.join('benchmarks', 'schema', 'result-1.json'),
           'comm': os.path.join('benchmarks', 'schema', 'comm-1.json')}


class ReferencesError(Exception):
    """The site's references file names something that does not exist or a wrong unit."""


def last_record(path):
    """The last JSON object line of a run's output (bench --json, benchrun run), or None."""
    found = None
    try:
        with open(path) as handle:
            for line in handle:
                if line.startswith('{'):
                    try:
                        found = json.loads(line)
                    except ValueError:
                        continue
    except OSError:
        return None
    return found


def all_records(path):
    try:
        with open(path) as handle:
            return [json.loads(line) for line in handle if line.strip()]
    except OSError:
        return []


def _schema_errors(record, kind):
    import jsonschema  # ReFrame's own dependency

    with open(os.path.join(ROOT, SCHEMAS[kind])) as handle:
        schema = json.load(handle)
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(record), key=lambda e: list(e.path))
    return '; '.join(f"{'.'.join(map(str, e.path)) or '(record)'}: {e.message[:200]}" for e in errors[:3])


def sane(record, kind):
    """A deferred sanity expression: a record was printed, it validates, its status is ok, and its replicas
    ended in sync (training) or every transfer was correct (comm)."""
    if record is None:
        return sn.assert_true(False, msg='the run printed no record')
    status = record.get('status')
    error = (record.get('error') or {}).get('message', '')
    checks = [sn.assert_eq(_schema_errors(record, kind), '', msg='the record does not validate: {0}'),
              sn.assert_eq(status, 'ok', msg=f'record status {{0}}, expected ok: {error}')]
    if kind == 'comm':
        checks.append(sn.assert_true(record.get('correct'), msg='bench comm found wrong results'))
    else:
        replicas = record.get('replicas') or {}
        in_sync = replicas.get('in_sync') if replicas.get('expected_in_sync', True) else True
        checks.append(sn.assert_true(in_sync is not False, msg='replicas ended out of sync'))
    return sn.all(checks)


def train_values(record):
    record = record or {}
    throughput = record.get('throughput') or {}
    total = throughput.get('images_per_sec')
    workers = (record.get('world') or {}).get('workers') or 1
    memory = record.get('memory') or {}
    values = {'images_per_sec': total, 'images_per_sec_per_rank': None if total is None else total / workers,
              'step_time_p90': (record.get('step_time_s') or {}).get('p90')}
    values.update({name: memory[field] / MiB for name, field in MEMORY_VIEWS.items() if memory.get(field) is not None})
    return values


def comm_values(record):
    rows = (record or {}).get('results') or []
    busbw = [row['busbw_gbps'] for row in rows if row.get('op') == 'allreduce']
    latency = [row['latency_us'] for row in rows if row.get('op') == 'pingpong' and row.get('latency_us') is not None]
    return {'busbw': max(busbw) if busbw else None, 'pingpong_latency': min(latency) if latency else None}


def overhead(records, baseline, runtime):
    """runtime_overhead in %: benchrun report's definition, (X_local - X_runtime) / X_local, on the means."""
    def mean(name):
        values = [r['throughput']['images_per_sec'] for r in records
                  if r.get('status') == 'ok' and (r.get('provenance') or {}).get('requested_runtime') == name]
        return sum(values) / len(values) if values else None

    base, other = mean(baseline), mean(runtime)
    return None if base is None or other is None else 100.0 * (base - other) / base


def ratio(verdicts_csv, baseline, runtime):
    """runtime_ratio and its 95% interval from compare-runtimes' verdicts.csv (its throughput row of `runtime`
    against `baseline`); None for each where the file or the row is not there or the interval is not known."""
    import csv

    names = ('runtime_ratio', 'runtime_ratio_ci_low', 'runtime_ratio_ci_high')
    try:
        with open(verdicts_csv, newline='') as f:
            rows = [row for row in csv.DictReader(f) if row['measure'] == 'images_per_sec ratio'
                    and row['runtime'] == runtime and row['reference'] == baseline]
    except (OSError, KeyError):
        rows = []
    values = [rows[0][column] if rows else '' for column in ('estimate', 'ci_lo', 'ci_hi')]
    return {name: float(value) if value else None for name, value in zip(names, values)}


def site_runtimes(names, bare):
    """The runtimes among `names` that some partition of the current system lists as a feature, `bare`
    first (no container: every partition has it). Tests are made only for these, so that a site's list
    of runtimes, not all of dlbench's, sets how many tests ReFrame instantiates."""
    from reframe.core.runtime import runtime

    features = {feature for partition in runtime().system.partitions for feature in partition.features}
    return [bare] + [name for name in names if name != bare and name in features]


# -- references -----------------------------------------------------------------------------------

MATCH_KEYS = ('test', 'framework', 'model', 'strategy', 'ranks', 'runtime')


def _systems():
    """What a reference may be keyed on in the site configuration ReFrame loaded (ReFrame's own scopes):
    'system:partition', 'system' (all its partitions), '*' (any)."""
    from reframe.core.runtime import runtime

    systems = runtime().site_config._site_config.get('systems', [])  # noqa: SLF001 - every system, not only the current one: no public accessor
    return {f"{s['name']}:{p['name']}" for s in systems for p in s.get('partitions', [])} | \
        {s['name'] for s in systems} | {'*'}


def load_references(path):
    """The references file as a list of entries, checked whole: every system:partition exists in the
    site configuration, every variable is one of PERF_VARIABLES, every unit is that variable's."""
    import yaml  # ReFrame's own dependency

    try:
        with open(path) as handle:
            entries = yaml.safe_load(handle) or []
    except OSError as error:
        raise ReferencesError(f'{path}: cannot be read ({error.strerror})') from None
    except yaml.YAMLError as error:
        raise ReferencesError(f'{path}: not readable as YAML: {" ".join(str(error).split())[:200]}') from None
    if not isinstance(entries, list):
        raise ReferencesError(f'{path}: expected a list of entries (match, system, variables)')
    systems = _systems()
    for number, entry in enumerate(entries, 1):
        where = f'{path}: entry {number}'
        if not isinstance(entry, dict) or not isinstance(entry.get('system'), str) or \
                not isinstance(entry.get('variables', {}), dict) or not isinstance(entry.get('match', {}), dict):
            raise ReferencesError(f'{where}: expected {{match: {{...}}, system: SYSTEM:PARTITION, variables: {{...}}}}')
        unknown = set(entry) - {'match', 'system', 'variables'}
        if unknown:
            raise ReferencesError(f'{where}: unknown key {sorted(unknown)[0]!r} (choices: match, system, variables)')
        if entry['system'] not in systems:
            raise ReferencesError(f"{where}: unknown system:partition {entry['system']!r} "
                                  f"(this site configuration has: {', '.join(sorted(systems))})")
        for key in entry.get('match', {}):
            if key not in MATCH_KEYS:
                raise ReferencesError(f"{where}: unknown match key {key!r} (choices: {', '.join(MATCH_KEYS)})")
        for name, value in entry.get('variables', {}).items():
            if name not in PERF_VARIABLES:
                raise ReferencesError(f"{where}: unknown performance variable {name!r} "
                                      f"(choices: {', '.join(PERF_VARIABLES)})")
            unit = PERF_VARIABLES[name][0]
            if not (isinstance(value, list) and len(value) == 4 and all(
                    v is None or isinstance(v, (int, float)) for v in value[:3]) and value[0] is not None):
                raise ReferencesError(f'{where}: {name}: expected [reference, lower, upper, unit] '
                                      f'(bounds as fractions or null), e.g. [100.0, -0.1, null, {unit!r}]')
            if value[3] != unit:
                raise ReferencesError(f'{where}: {name} is measured in {unit!r}, the reference says {value[3]!r}')
    return entries


def references(entries, selector):
    """ReFrame's `reference` for one test: the entries whose `match` fields all equal the test's
    (a later entry wins for the same system and variable)."""
    found = {}
    for entry in entries:
        if all(str(selector.get(key)) == str(value) for key, value in entry.get('match', {}).items()):
            for name, value in entry.get('variables', {}).items():
                found.setdefault(entry['system'], {})[name] = tuple(value)
    return found
