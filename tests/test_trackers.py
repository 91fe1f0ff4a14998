"""Reporting to trackio, Weights & Biases and MLflow with the real libraries, offline, read back with their own API or
files: the series equal metrics.json's; a fit stopped and resumed (in the same process, and from a checkpoint in a new
process after more steps were logged) is one run with each step once, as a fit never stopped; DDP writes from process 0
only; a tracker that raises does not stop the fit. Everything is written under pytest's tmp dirs, and nothing reaches
the network (trackio's local store, W&B offline, MLflow's file store)."""
import glob
import importlib.util
import json
import os
import struct
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from tracker_fit import LOG_EVERY, STOP, learner, stop_at, tracker_writer
from trainer_nb.trackers import TrackerWarning, TrackioWriter
from trainer_nb.writers import metrics_series, read_metrics

if any(importlib.util.find_spec(m) is None for m in ('trackio', 'wandb', 'mlflow')):  # (not imported: see `places`)
    pytest.skip('needs trackio, wandb and mlflow (the dev extra)', allow_module_level=True)

HERE = Path(__file__).parent
COMPARED = ('train/loss', 'lr', 'samples', 'valid/loss', 'epoch')  # (times and throughput differ from run to run)
TRACKERS = ('trackio', 'wandb', 'mlflow')


@pytest.fixture(scope='module')
def places(tmp_path_factory):
    "The trackers' folders, in tmp, set in the environment before trackio is imported (it reads TRACKIO_DIR then)."
    root = tmp_path_factory.mktemp('trackers')
    env = {'TRACKIO_DIR': root / 'trackio', 'WANDB_DIR': root / 'wandb', 'WANDB_CACHE_DIR': root / 'wandb-cache',
           'WANDB_CONFIG_DIR': root / 'wandb-config', 'WANDB_DATA_DIR': root / 'wandb-data',
           'WANDB_ARTIFACT_DIR': root / 'wandb-artifacts', 'MLFLOW_TRACKING_URI': (root / 'mlruns').as_uri()}
    for p in env.values():
        if isinstance(p, Path): p.mkdir()
    flags = {'WANDB_MODE': 'offline', 'WANDB_SILENT': 'true', 'MLFLOW_ALLOW_FILE_STORE': 'true',
             'MLFLOW_DISABLE_TELEMETRY': 'true', 'HF_HUB_OFFLINE': '1', 'HF_HUB_DISABLE_TELEMETRY': '1',
             'GRADIO_ANALYTICS_ENABLED': 'False', 'DO_NOT_TRACK': '1', 'OMP_NUM_THREADS': '1'}
    saved = dict(os.environ)
    os.environ.update({k: str(v) for k, v in env.items()}, **flags)
    import trackio.utils
    if Path(trackio.utils.TRACKIO_DIR) != env['TRACKIO_DIR']:
        pytest.skip("trackio was imported before this module set TRACKIO_DIR: it would write outside tmp")
    yield env
    os.environ.clear()
    os.environ.update(saved)


# ---- reading each tracker back: {run id: {name: [(step, value), ...]}}, with every value it holds

def trackio_runs(project: str, places) -> dict:
    import trackio
    from trackio.sqlite_storage import SQLiteStorage
    runs = {}
    for run in trackio.Api().runs(project):
        series = runs.setdefault(run.id, {})
        for row in SQLiteStorage.get_logs(project, run_id=run.id):
            for name, value in row.items():
                if name not in ('step', 'timestamp'): series.setdefault(name, []).append((row['step'], value))
    return runs


def wandb_records(path: Path):
    "The `Record`s of a `.wandb` file: a 7-byte header, then LevelDB log records (32 KiB blocks) of protobufs."
    from wandb.proto import wandb_internal_pb2 as pb
    data = path.read_bytes()
    assert data[:4] == b':W&B', data[:7]
    pos, block, parts = 7, 32768, b''
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left  # (a block's tail, too short for a header: zeros)
            continue
        _crc, length, kind = struct.unpack('<IHB', data[pos:pos + 7])
        if kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        parts = chunk if kind in (1, 2) else parts + chunk  # full, first / middle, last
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(parts)
            yield record


def finished_records(path: Path, wait: float = 20.) -> list:
    """The records of a `.wandb` file once its run has finished (its `exit` record is there), waiting up to `wait` seconds:
    wandb's service process may still be writing the file after `finish` has returned (in the suite, under load, a file
    was read without even its `run` record)."""
    deadline = time.monotonic() + wait
    while True:
        records = list(wandb_records(path))
        if any(r.WhichOneof('record_type') == 'exit' for r in records) or time.monotonic() > deadline: return records
        time.sleep(0.05)


def wandb_runs(project: str, places, notes: dict | None = None) -> dict:
    """The runs of `project` as `wandb sync` would make them: the segments of a run (an `offline-run-*` folder each,
    by start time), a segment that rewinds (`branch_point` on its own run id) dropping the steps after its point; a
    fork (`branch_point` on another run) starting with that run's steps up to its point. `notes`: filled with each
    run's notes."""
    segments = {}
    for f in glob.glob(str(places['WANDB_DIR'] / 'wandb' / 'offline-run-*' / 'run-*.wandb')):
        records = finished_records(Path(f))
        run = next((r.run for r in records if r.WhichOneof('record_type') == 'run'), None)
        if run is None or run.project != project: continue
        rows = [{(i.key or '/'.join(i.nested_key)): json.loads(i.value_json) for i in r.history.item}
                for r in records if r.WhichOneof('record_type') == 'history']
        start = run.start_time.seconds + run.start_time.nanos / 1e9
        segments.setdefault(run.run_id, []).append((start, run.branch_point, rows))
        if notes is not None and run.notes: notes[run.run_id] = run.notes
    histories, forks = {}, {}
    for run_id, parts in segments.items():
        kept = []
        for _, branch, rows in sorted(parts, key=lambda p: p[0]):
            if branch.run == run_id: kept = [r for r in kept if r['_step'] <= branch.value]  # (a rewind)
            elif branch.run: forks[run_id] = (branch.run, branch.value)  # (a fork of another run)
            kept += rows
        histories[run_id] = kept
    runs = {}
    for run_id, rows in histories.items():
        if run_id in forks:
            parent, step = forks[run_id]
            rows = [r for r in histories[parent] if r['_step'] <= step] + rows
        series = runs.setdefault(run_id, {})
        for row in rows:
            for name, value in row.items():
                if not name.startswith('_'): series.setdefault(name, []).append((row['_step'], value))
    return runs


def mlflow_runs(project: str, places) -> dict:
    from mlflow.tracking import MlflowClient
    client = MlflowClient(places['MLFLOW_TRACKING_URI'])
    experiment = client.get_experiment_by_name(project)
    runs = {}
    for run in client.search_runs([experiment.experiment_id]):  # (the active ones: not those in MLflow's trash)
        runs[run.info.run_id] = {key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]
                                 for key in run.data.metrics}
    return runs


READERS = {'trackio': trackio_runs, 'wandb': wandb_runs, 'mlflow': mlflow_runs}


def one_run(tracker: str, project: str, places) -> dict:
    "The only run of `project`, as {name: {step: value}}, checked to hold each step of each name once."
    runs = READERS[tracker](project, places)
    assert len(runs) == 1, f"{len(runs)} runs in {project}"
    return steps_once(next(iter(runs.values())))


def steps_once(series: dict) -> dict:
    "A run's series as {name: {step: value}}, checked to hold each step of each name once."
    out = {}
    for name, points in series.items():
        steps = [s for s, _ in points]
        assert len(steps) == len(set(steps)), f"{name}: steps logged twice: {sorted(steps)}"
        out[name] = dict(sorted(points))
    return out


def json_series(folder: Path) -> dict:
    return {name: dict(zip(*series)) for name, series in metrics_series(read_metrics(folder / 'metrics.json')).items()}


def same(a: dict, b: dict, names=COMPARED):
    for name in names:
        assert a.get(name) == pytest.approx(b.get(name), rel=1e-6), name
        assert a.get(name), name


# ---- the tests

def project_of(tracker: str, folder: Path) -> str:
    "A project of its own for each run folder (the trackers' stores are shared by the tests of this module)."
    return f'{tracker}-{folder.parent.name}-{folder.name}'


def never_stopped(tracker: str, places, folder: Path) -> dict:
    "The run of a fit never stopped (checked against its metrics.json)."
    learn = learner(folder, tracker, project_of(tracker, folder), places['MLFLOW_TRACKING_URI'], stop=None)
    learn.fit(3)
    assert learn.step == 24 and learn.stop_reason == 'completed'
    logged = one_run(tracker, project_of(tracker, folder), places)
    same(logged, json_series(folder))
    return logged


@pytest.mark.parametrize('tracker', TRACKERS)
def test_stopped_and_resumed_in_the_same_process(tracker, places, tmp_path):
    reference = never_stopped(tracker, places, tmp_path / 'whole')
    assert sorted(reference['train/loss']) == list(range(1, 25))
    assert sorted(reference['valid/loss']) == [8, 16, 24]
    project = project_of(tracker, tmp_path / 'stopped')
    learn = learner(tmp_path / 'stopped', tracker, project, places['MLFLOW_TRACKING_URI'])
    learn.fit(3)
    assert learn.step == STOP
    learn.resume()
    assert learn.step == 24 and learn.stop_reason == 'completed'
    logged = one_run(tracker, project, places)  # one run, each step once
    same(logged, json_series(tmp_path / 'stopped'))  # the series of metrics.json
    same(logged, reference)  # the values of the fit never stopped
    if tracker == 'trackio':  # the run's configuration (run.json's settings) is kept through the resume
        import trackio
        (run,) = trackio.Api().runs(project)
        assert run.config['opt']['class'] == 'SGD' and run.config['kind'] == 'fit'
    if tracker == 'mlflow':
        from mlflow.tracking import MlflowClient
        (run,) = MlflowClient(places['MLFLOW_TRACKING_URI']).search_runs(
            [MlflowClient(places['MLFLOW_TRACKING_URI']).get_experiment_by_name(project).experiment_id])
        assert run.data.params['opt.class'] == 'SGD' and run.info.status == 'FINISHED'
        assert run.data.tags['trainer_nb.stop_reason'] == 'completed'


@pytest.mark.slow
@pytest.mark.parametrize('tracker', TRACKERS)
def test_resumed_in_a_new_process_replaces_the_steps_after_the_checkpoint(tracker, places, tmp_path):
    reference = never_stopped(tracker, places, tmp_path / 'whole')
    uri, folder = places['MLFLOW_TRACKING_URI'], tmp_path / 'crashed'
    project = project_of(tracker, folder)
    learn = learner(folder, tracker, project, uri)
    learn.fit(3)  # stops at step 10
    learn.save('at10')  # the checkpoint a crash leaves
    learn.resume(cbs=[stop_at(17)])  # the process goes on past it: steps 11 to 17 are logged, then it "crashes"
    assert max(one_run(tracker, project, places)['train/loss']) == 17
    child = subprocess.run([sys.executable, str(HERE / 'tracker_fit.py'), 'resume', tracker, str(folder), project,
                            uri, 'at10'], capture_output=True, text=True, timeout=300, env=os.environ)
    assert child.returncode == 0, child.stderr[-3000:]
    assert 'step 24, completed' in child.stdout, child.stdout
    logged = one_run(tracker, project, places)  # one run, each step once
    same(logged, reference)
    assert sorted(logged['train/loss']) == list(range(1, 25))
    if tracker == 'mlflow':  # the run replaced by its copy up to the checkpoint is in MLflow's trash, and says so
        from mlflow.entities import ViewType
        from mlflow.tracking import MlflowClient
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name(project).experiment_id
        (old,) = client.search_runs([experiment], run_view_type=ViewType.DELETED_ONLY)
        (new,) = client.search_runs([experiment])
        assert old.data.tags['trainer_nb.replaced_by'] == new.info.run_id
        assert new.data.tags['trainer_nb.resumed_from'] == f"{old.info.run_id} at step {STOP}"


@pytest.mark.slow
@pytest.mark.parametrize('tracker', TRACKERS)
def test_a_validation_at_the_checkpoints_step_reaches_the_run_after_a_load(tracker, places, tmp_path):
    """A fit stopped at an epoch's last batch, before that epoch's validation, validates when it resumes, at the step
    the writer already sent. After a load (a new process), W&B goes on after the step it was rewound to, and dropped
    that validation (wandb-core: "ignoring partial history record"): it is rewound one step further now, and the step
    is sent again, whole."""
    reference = never_stopped(tracker, places, tmp_path / 'whole')
    folder = tmp_path / 'stopped'
    project = project_of(tracker, folder)
    learn = learner(folder, tracker, project, places['MLFLOW_TRACKING_URI'], stop=8)  # the last batch of epoch 1
    learn.fit(3)
    assert learn.step == 8 and 'valid/loss' not in learn.storage.histories()
    learn.save('at8')
    learn = learner(folder, tracker, project, places['MLFLOW_TRACKING_URI'], stop=None)  # (as a new process would)
    learn.load('at8')
    learn.resume()
    assert learn.step == 24 and learn.stop_reason == 'completed'
    logged = one_run(tracker, project, places)
    assert sorted(logged['valid/loss']) == [8, 16, 24]
    assert sorted(logged['train/loss']) == list(range(1, 25))
    same(logged, reference)


def test_mlflow_ends_a_run_it_replaces_as_killed(places, tmp_path):
    "A process killed after a checkpoint leaves its MLflow run RUNNING: the resume that replaces it ends it KILLED."
    from mlflow.tracking import MlflowClient
    uri, folder = places['MLFLOW_TRACKING_URI'], tmp_path / 'killed'
    project = project_of('mlflow', folder)
    learn = learner(folder, 'mlflow', project, uri)
    learn.fit(3)  # stops at step 10
    learn.save('at10')
    learn.resume(cbs=[stop_at(17)])
    client, old = MlflowClient(uri), learn.report.writers[0].run_id
    client.update_run(old, status='RUNNING')  # (as a process killed at step 17 leaves it: never ended)
    learn = learner(folder, 'mlflow', project, uri, stop=None)
    learn.load('at10')
    learn.resume()
    replaced = client.get_run(old).info
    assert (replaced.status, replaced.lifecycle_stage) == ('KILLED', 'deleted')
    assert client.get_run(learn.report.writers[0].run_id).info.status == 'FINISHED'


def test_wandb_can_fork_instead_of_rewinding(places, tmp_path):
    reference = never_stopped('wandb', places, tmp_path / 'whole')
    folder = tmp_path / 'crashed'
    project = project_of('wandb', folder)
    def make(): return learner(folder, 'wandb', project, writer=tracker_writer('wandb', project, after_load='fork'))
    learn = make()
    learn.fit(3)  # stops at step 10
    learn.save('at10')
    learn.resume(cbs=[stop_at(17)])  # logs steps 11 to 17
    old = learn.report.writers[0].run_id
    learn = make()  # (a new learner loads the checkpoint as a new process would)
    learn.load('at10')
    learn.resume()
    new, notes = learn.report.writers[0].run_id, {}
    runs = wandb_runs(project, places, notes)
    assert set(runs) == {old, new}  # the fork is a run of its own...
    same(steps_once(runs[new]), reference)  # ...with the old run's steps up to 10, then its own: each step once
    assert max(steps_once(runs[old])['train/loss']) == 17  # the old run keeps what it logged
    assert notes[new] == f"trainer_nb: resumed from run {old} at step {STOP}"


def test_a_checkpoint_finds_its_steps_in_the_trackio_store(places, tmp_path):
    "trackio stores rows from a thread every 0.5 s: the writer's state, saved in a checkpoint, stores them first."
    from trackio.sqlite_storage import SQLiteStorage
    from trainer_nb.callback.core import Callback
    folder = tmp_path / 'run'
    project, stored = project_of('trackio', folder), {}

    class Look(Callback):
        order = 80  # after the ReportCallback's write at step 10
        def after_batch(self):
            if self.learn.training and self.learn.step == 10:
                state = self.learn.report.state_dict()['writers'][0]  # what a checkpoint saves
                rows = SQLiteStorage.get_logs(project, run_id=state['run_id'])
                stored['sent_to'], stored['max'] = state['sent_to'], max((row['step'] for row in rows), default=None)

    learn = learner(folder, 'trackio', project, stop=None)
    learn.add_cb(Look())
    learn.fit(2)
    assert stored == {'sent_to': 10, 'max': 10}


def test_a_new_fit_is_a_new_run(places, tmp_path):
    learn = learner(tmp_path / 'run', 'trackio', 'trackio-two-fits')
    learn.fit(1)  # stops at 10
    learn.fit(1)  # not a resume: a new run
    runs = trackio_runs('trackio-two-fits', places)
    assert len(runs) == 2
    import trackio
    assert sorted(r.name for r in trackio.Api().runs('trackio-two-fits')) == ['run', 'run-2']


def test_trackio_says_once_that_each_run_finished(places, tmp_path):
    "trackio prints its end line when a run finishes: once a fit, not again at the next fit's start or at the exit."
    script = ("import sys\nsys.path.insert(0, sys.argv[1])\nfrom tracker_fit import learner\n"
              "learn = learner(sys.argv[2], 'trackio', 'trackio-end-lines')\nlearn.fit(1)\nlearn.fit(1)\n")
    child = subprocess.run([sys.executable, '-c', script, str(HERE), str(tmp_path / 'run')], capture_output=True,
                           text=True, timeout=300, env=os.environ)
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.count('* Run finished.') == 2, child.stdout


def test_a_checkpoint_before_the_first_write_resumes_the_same_trackio_run(places, tmp_path):
    "A checkpoint that holds no step sent yet (sent_to -1): the resume from it empties the run, which goes on under its name."
    reference = never_stopped('trackio', places, tmp_path / 'whole')
    folder = tmp_path / 'early'
    project = project_of('trackio', folder)
    def make(): return learner(folder, 'trackio', project, stop=None)
    from trainer_nb.callback.core import LambdaCallback
    sent = []
    def save_at_3(learn):
        if learn.step == 3:
            learn.controls.save('at3')  # (at the boundary after step 3, before the first write: every 5 steps)
            sent.append(learn.report.writers[0].sent_to)
    learn = make()
    learn.fit(3, cbs=[LambdaCallback(after_step=save_at_3), stop_at(17)])  # goes on past it to 17, then "crashes"
    assert sent == [-1] and learn.step == 17
    learn = make()  # (a new learner loads the checkpoint as a new process would)
    learn.load('at3')
    with warnings.catch_warnings():
        warnings.simplefilter('error', TrackerWarning)  # (the writer must not stop)
        learn.resume()
    assert learn.stop_reason == 'completed'
    logged = one_run('trackio', project, places)  # one run, each step once
    same(logged, reference)
    assert sorted(logged['train/loss']) == list(range(1, 25))


def test_a_writer_given_to_a_second_learner_reports_that_learners_fit(places, tmp_path):
    "One writer object for two learners (a sweep in a loop, a cell run again): each run gets its learner's steps."
    import trackio
    writer = TrackioWriter(project='trackio-shared-writer')
    for name in ('a', 'b'):
        learner(tmp_path / name, 'trackio', 'trackio-shared-writer', stop=None, writer=writer).fit(1)
    runs = {r.id: r.name for r in trackio.Api().runs('trackio-shared-writer')}
    logged = {runs[i]: steps_once(series) for i, series in trackio_runs('trackio-shared-writer', places).items()}
    assert sorted(logged) == ['a', 'b']
    assert [sorted(logged[n]['train/loss']) for n in ('a', 'b')] == [list(range(1, 9))] * 2


def test_a_write_that_failed_is_sent_by_the_resume(places, tmp_path):
    "A tracker that fails once (a network error): the fit goes on without it, and the resume sends what it did not."
    folder = tmp_path / 'flaky'
    project = project_of('trackio', folder)
    learn = learner(folder, 'trackio', project)  # stops at 10
    writer, failed = learn.report.writers[0], []
    log = writer._log
    def flaky(step, values):
        if step == 7 and not failed:
            failed.append(step)
            raise ConnectionError('tracker.invalid unreachable')
        log(step, values)
    writer._log = flaky
    with pytest.warns(TrackerWarning, match='unreachable'): learn.fit(3)
    assert learn.step == STOP and failed == [7]
    learn.resume()
    logged = one_run('trackio', project, places)  # one run, each step once: 6 (sent before the failure) too
    assert sorted(logged['train/loss']) == list(range(1, 25))


def test_report_to_in_another_order_after_a_restart_continues_each_run(places, tmp_path):
    uri, folder = places['MLFLOW_TRACKING_URI'], tmp_path / 'reordered'
    projects = {t: project_of(t, folder) for t in ('trackio', 'mlflow')}
    def make(order):
        return learner(folder, 'trackio', projects['trackio'], uri, writer=[tracker_writer(t, projects[t], uri) for t in order])
    learn = make(['trackio', 'mlflow'])
    learn.fit(3)  # stops at 10
    learn.save('at10')
    learn = make(['mlflow', 'trackio'])  # (a new process, report_to listed the other way round)
    learn.load('at10')
    learn.resume()
    for tracker in projects:
        assert sorted(one_run(tracker, projects[tracker], places)['train/loss']) == list(range(1, 25)), tracker


def test_a_writer_refuses_what_its_tracker_would_refuse_only_at_the_fit(places):
    from trainer_nb.trackers import WandbWriter
    with pytest.raises(ValueError, match="WandbWriter.mode='offlin'.: wandb's mode is one of 'online', 'offline'"):
        WandbWriter(mode='offlin')
    with pytest.raises(TypeError, match=r"takes no argument 'entitty' \(did you mean 'entity'\?\), which you gave"):
        WandbWriter(entitty='me')
    with pytest.raises(TypeError, match="TrackioWriter.project=3.: the project is a non-empty string"):
        TrackioWriter(project=3)


class Unreachable:
    "A tracker module every call of which raises, as a tracker that cannot be reached."
    def __init__(self, name: str = 'trackio'): self.name = name
    def __getattr__(self, name: str): return Unreachable(f"{self.name}.{name}")
    def __call__(self, *args, **kwargs): raise ConnectionError(f"{self.name}: tracker.invalid unreachable")


@pytest.mark.parametrize('how', ['raises', 'bad project'])
def test_a_tracker_that_raises_does_not_stop_the_fit(how, places, tmp_path):
    writer = TrackioWriter(project='registry-mine' if how == 'bad project' else 'fine')
    if how == 'raises': writer._trackio = Unreachable()
    learn = learner(tmp_path / 'run', 'trackio', None, writer=writer)
    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter('always')
        learn.fit(3)
        learn.resume()
    shown = [w for w in shown if issubclass(w.category, TrackerWarning)]
    assert learn.stop_reason == 'completed' and learn.step == 24
    assert len(shown) == 2, [str(w.message) for w in shown]  # once in each fit (the resume tries again)
    expected = 'tracker.invalid unreachable' if how == 'raises' else "Project name 'registry-mine' is not allowed"
    assert expected in str(shown[0].message), shown[0].message
    assert sorted(json_series(tmp_path / 'run')['train/loss']) == list(range(1, 25))  # metrics.json is whole
    assert (tmp_path / 'run' / 'checkpoints' / 'last.pt').is_file()


def test_a_moved_api_is_named(places, monkeypatch):
    import trackio
    monkeypatch.setattr(trackio, 'init', lambda project, name=None, config=None: None)
    with pytest.raises(RuntimeError, match=r"trackio.init takes no argument 'resume'.*trackio==0.43.0"):
        TrackioWriter()


def test_a_missing_extra_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, 'wandb', None)
    from trainer_nb.trackers import WandbWriter
    with pytest.raises(ImportError, match=r'pip install "trainer_nb\[wandb\]"'):
        WandbWriter()


@pytest.mark.slow
def test_ddp_reports_once_from_process_0(places, tmp_path):
    folder = tmp_path / 'ddp'
    proc = subprocess.run([sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2',
                           str(HERE / 'tracker_fit.py'), 'ddp', 'trackio', str(folder), 'trackio-ddp', ''],
                          capture_output=True, text=True, timeout=300, env=os.environ)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 'rank 1 of 2' in proc.stdout
    logged = one_run('trackio', 'trackio-ddp', places)  # one run: process 1 reported nothing
    same(logged, json_series(folder), names=('train/loss', 'valid/loss', 'lr'))
    assert sorted(logged['train/loss']) == list(range(1, 9))  # 2 epochs of 4 steps (8 batches on 2 processes)
    import trackio
    (run,) = trackio.Api().runs('trackio-ddp')
    assert run.config['world_size'] == 2  # (the configuration run.json records)
