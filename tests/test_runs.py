"""Run records and their comparison: what `run.json` holds after a fit, a resume (in the same process and after a
restart), an interrupt and an error; the settings in which runs differ; `Runs` over damaged and older run
folders; and `python -m trainer_nb.runs`."""
import datetime
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trainer_nb.callback.core import Callback, LambdaCallback
from trainer_nb.callback.run_record import RunRecord, git_state
from trainer_nb.runs import Runs, differing_settings, flatten
from trainer_nb.testing import synth_learner

ROOT = Path(__file__).resolve().parent.parent


def r2(preds, targets):
    "A metric that is better higher (its direction comes from its name: not a loss, not an error)."
    return 1 - ((preds - targets) ** 2).mean() / targets.var()


def learner(path, lr=0.1, **kwargs):
    "A quiet learner with the default callbacks (RunRecord among them), 8 batches an epoch."
    return synth_learner(n_train=128, n_valid=32, bs=16, lr=lr, default_cbs=True, progress=False, path=path,
                         metrics=[r2], **kwargs)


def entries(folder) -> list[dict]:
    data = json.loads((Path(folder) / 'run.json').read_text())
    assert data['format'] == 'trainer_nb.run/1'
    return data['entries']


def stop_at(step: int, reason: str = 'interrupted') -> LambdaCallback:
    "Ask the fit to stop at the batch boundary after optimizer step `step` (as the Stop button or Ctrl+C do)."
    return LambdaCallback(after_step=lambda learn: learn.request_stop(reason) if learn.step == step else None)


# ---------------------------------------------------------------- run.json

def test_an_entry_after_a_fit(tmp_path):
    learn = learner(tmp_path / 'run')
    learn.fit(2)
    [entry] = entries(tmp_path / 'run')
    assert (entry['kind'], entry['stop_reason'], entry['step_start'], entry['step_end'], entry['steps']) == \
        ('fit', 'completed', 0, 16, 16)
    start, end = (datetime.datetime.fromisoformat(entry[k]) for k in ('start', 'end'))
    assert start.tzinfo is not None and start <= end
    s = entry['settings']
    assert s['model'] == {'class': 'RegModel', 'params': 2, 'trainable': 2}
    assert (s['opt']['class'], s['opt']['lr'], s['opt']['momentum'], s['lr']) == ('SGD', 0.1, 0, 0.1)
    assert s['fit'] == {'n_epochs': 2, 'n_steps': None, 'eval_every': None, 'accum_every': 1}
    assert s['data'] == {'train': {'batch_size': 16, 'batches': 8, 'items': 128},
                         'valid': {'batch_size': 16, 'batches': 2, 'items': 32}}
    assert (s['loss_func'], s['metrics'], s['schedule'], s['device']) == ('mse_loss', ['r2'], None, 'cpu')
    assert s['callbacks'] == ['Recorder', 'Throughput', 'WriterCallback', 'SaveOnStop', 'RunRecord', 'Preemption']
    assert s['cbs'] == {'Throughput': {'every': 2.0}, 'WriterCallback': {'log_every': 20},
                        'Preemption': {'signals': ['SIGTERM', 'SIGUSR1'], 'message': True}}
    assert s['seed'] == {'torch': torch.initial_seed(), 'data': None}
    assert (entry['env']['torch'], entry['env']['python']) == (torch.__version__, sys.version.split()[0])
    # the results: the storage's last validation, and the best of each validation scalar in its direction
    history = {n: learn.storage.history(n).values() for n in ('valid/loss', 'valid/r2')}
    assert entry['final'] == {'valid/loss': history['valid/loss'][-1][0], 'valid/r2': history['valid/r2'][-1][0]}
    best_r2 = max(history['valid/r2'])
    assert entry['best']['valid/r2'] == {'value': best_r2[0], 'step': best_r2[1], 'mode': 'max'}
    assert entry['best']['valid/loss'] == dict(zip(('value', 'step'), min(history['valid/loss'])), mode='min')
    # paths relative to the run folder, and room for more
    assert entry['files'] == {'metrics': 'metrics.json'}
    # what Throughput measured (logged at the end of this short fit): samples a second, times a step, peak memory
    assert sorted(entry['summary']) == ['perf/compute_ms', 'perf/data_ms', 'perf/rss_mb', 'perf/samples_per_s']
    assert entry['summary']['perf/samples_per_s'] > 0 and entry['summary']['perf/rss_mb'] > 10
    assert str(tmp_path) not in (tmp_path / 'run' / 'run.json').read_text()


def test_a_resume_appends_an_entry(tmp_path):
    learn = learner(tmp_path)
    learn.fit(2, cbs=stop_at(3))
    first = entries(tmp_path)
    assert [(e['kind'], e['stop_reason'], e['step_end']) for e in first] == [('fit', 'interrupted', 3)]
    learn.resume()
    learn.fit(1)
    got = entries(tmp_path)
    assert got[0] == first[0]  # (the first entry, as it was)
    assert [(e['kind'], e['stop_reason'], e['step_start'], e['step_end'], e['steps']) for e in got] == \
        [('fit', 'interrupted', 0, 3, 3), ('resume', 'completed', 3, 16, 13), ('fit', 'completed', 16, 24, 8)]
    assert got[0]['settings']['callbacks'] == got[1]['settings']['callbacks']  # (the resumed fit's own callback too)
    assert ['LambdaCallback' in e['settings']['callbacks'] for e in got] == [True, True, False]
    assert len({e['id'] for e in got}) == 3


def test_a_resume_after_a_restart(tmp_path):
    learn = learner(tmp_path, cbs=[stop_at(5)])
    learn.fit(2)
    assert entries(tmp_path)[0]['files'] == {'metrics': 'metrics.json', 'checkpoint': 'checkpoints/last.pt'}
    fresh = learner(tmp_path, cbs=[stop_at(5)])  # a new process builds the same learner, loads the checkpoint, resumes
    fresh.load('last')
    fresh.resume()
    got = entries(tmp_path)
    assert [(e['kind'], e['stop_reason'], e['step_start'], e['step_end']) for e in got] == \
        [('fit', 'interrupted', 0, 5), ('resume', 'completed', 5, 16)]


def test_an_interrupt_mid_batch(tmp_path):
    "A second Ctrl+C (a KeyboardInterrupt in the middle of a batch): the fit ends at once, the entry says so."
    def second_interrupt(learn):
        if learn.step == 2: raise KeyboardInterrupt
    learn = learner(tmp_path)
    with pytest.raises(KeyboardInterrupt): learn.fit(1, cbs=LambdaCallback(after_step=second_interrupt))
    [entry] = entries(tmp_path)
    assert (entry['stop_reason'], entry['step_end'], entry['end'] is not None) == ('interrupted', 2, True)


def test_an_error_in_a_callback(tmp_path):
    def boom(learn):
        if learn.step == 4: raise RuntimeError('boom')
    learn = learner(tmp_path)
    with pytest.raises(RuntimeError, match='boom'): learn.fit(2, cbs=LambdaCallback(after_step=boom))
    [entry] = entries(tmp_path)
    assert (entry['kind'], entry['stop_reason'], entry['step_end'], entry['steps']) == ('fit', 'error', 4, 4)
    assert entry['end'] is not None and entry['final'] == {}  # (no validation ran)


def test_an_error_before_the_record_started(tmp_path):
    "A callback that runs before RunRecord fails in before_fit: after_fit still writes the whole entry."
    class FailsFirst(Callback):
        order = 0
        def before_fit(self): raise ValueError('bad setting')
    learn = learner(tmp_path)
    with pytest.raises(ValueError, match='bad setting'): learn.fit(1, cbs=FailsFirst())
    [entry] = entries(tmp_path)
    assert (entry['stop_reason'], entry['steps'], entry['settings']['model']['params']) == ('error', 0, 2)


def test_a_fit_killed_leaves_its_start(tmp_path):
    "What the start wrote is on disk before the first batch: a process killed now leaves it, with no end."
    seen = []
    def look(learn):
        if not seen: seen.append(entries(tmp_path))
    learner(tmp_path).fit(1, cbs=LambdaCallback(before_batch=look))
    [[entry]] = seen
    assert (entry['end'], entry['stop_reason'], entry['step_end'], entry['final']) == (None, None, None, {})
    assert Runs(tmp_path.parent, tmp_path.name).runs[0].stop_reason == 'completed'


def test_the_schedule_and_the_fit_by_steps(tmp_path):
    from trainer_nb.callback.schedule import TorchScheduler
    learn = learner(tmp_path)
    learn.fit_one_cycle(1, lr_max=0.05, moms=None)
    step_lr = TorchScheduler(lambda opt: torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5))
    learn.fit(n_steps=4, eval_every=2, cbs=step_lr, lr=0.02)
    one_cycle, stepped = (e['settings'] for e in entries(tmp_path))
    assert one_cycle['schedule'] == {'ParamScheduler': {'lr': [[0.25, 'cos', 0.002, 0.05], [0.75, 'cos', 0.05, 5e-07]]}}
    sched = stepped['schedule']['TorchScheduler']
    assert (sched['every'], sched['scheduler'], sched['step_size'], sched['gamma'], sched['base_lrs']) == \
        ('batch', 'StepLR', 2, 0.5, [0.02])
    assert stepped['fit'] == {'n_epochs': None, 'n_steps': 4, 'eval_every': 2, 'accum_every': 1}
    assert (stepped['lr'], stepped['opt']['lr']) == (0.02, 0.1)  # (fit(lr=...): the optimizer's default stays)


def test_nothing_per_step():
    assert set(RunRecord().handlers()) == {'before_fit', 'after_fit'}


def test_the_git_state_of_the_working_folder(tmp_path, monkeypatch):
    if shutil.which('git') is None: pytest.skip('git is not installed')
    code = tmp_path / 'code'
    code.mkdir()
    def git(*args):
        return subprocess.run(['git', '-c', 'user.name=t', '-c', 'user.email=t@example.com', *args], cwd=code,
                              capture_output=True, text=True, check=True).stdout.strip()
    git('init', '-q')
    (code / 'train.py').write_text('lr = 0.1\n')
    git('add', 'train.py')
    git('commit', '-qm', 'first')
    monkeypatch.chdir(code)
    learner(tmp_path / 'run').fit(1)
    (code / 'train.py').write_text('lr = 0.2\n')  # a change not committed
    learner(tmp_path / 'run').fit(1)
    head = git('rev-parse', 'HEAD')
    assert [e['env']['git'] for e in entries(tmp_path / 'run')] == [{'commit': head, 'dirty': False},
                                                                     {'commit': head, 'dirty': True}]


def test_no_git_never_fails_the_fit(tmp_path, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path / 'empty'))  # no git to be found
    assert git_state() is None
    learner(tmp_path).fit(1)
    assert entries(tmp_path)[0]['env']['git'] is None


def test_a_damaged_run_json_is_kept_aside(tmp_path):
    (tmp_path / 'run.json').write_text('{"format": "trainer_nb.run/1", "entr')
    with pytest.warns(UserWarning, match='kept as run.json.damaged-'):
        learner(tmp_path).fit(1)
    assert len(entries(tmp_path)) == 1
    [aside] = tmp_path.glob('run.json.damaged-*')
    assert aside.read_text() == '{"format": "trainer_nb.run/1", "entr'


def test_the_lr_finder_leaves_no_entry(tmp_path):
    learner(tmp_path).lr_find(num_it=5, show_plot=False)
    assert not (tmp_path / 'run.json').exists()


def test_only_process_0_writes(tmp_path):
    from trainer_nb.core import SingleProcess
    class SecondOfTwo(SingleProcess): rank, world_size = 1, 2
    learn = synth_learner(n_train=64, bs=16, default_cbs=True, progress=False, path=tmp_path)
    learn.set_comm(SecondOfTwo())
    assert [type(cb).__name__ for cb, _ in learn.callbacks.tables[True]['before_fit']].count('RunRecord') == 0


# ---------------------------------------------------------------- the settings in which runs differ

def test_differing_settings():
    base = {'model': {'class': 'Net', 'params': 10}, 'opt': {'class': 'AdamW', 'lr': 1e-3, 'betas': (0.9, 0.999)},
            'cbs': {'EarlyStopping': {'patience': 3}}, 'seed': {'torch': 0}}
    other = json.loads(json.dumps(base))  # (read back from JSON: the tuple is a list)
    assert differing_settings([base, other]) == []
    other['opt']['lr'] = 1e-2
    other['cbs']['EarlyStopping']['patience'] = 5
    assert differing_settings([base, other]) == ['opt.lr', 'cbs.EarlyStopping.patience']
    third = json.loads(json.dumps(base))
    del third['cbs']['EarlyStopping']  # no EarlyStopping at all: its settings differ from both
    third['cbs']['GradientClip'] = {'max_norm': 1.0}
    assert differing_settings([base, other, third]) == ['opt.lr', 'cbs.GradientClip.max_norm',
                                                        'cbs.EarlyStopping.patience']
    assert differing_settings([base]) == [] and differing_settings([]) == []
    assert differing_settings([flatten(base), flatten(other)]) == ['opt.lr', 'cbs.EarlyStopping.patience']
    assert differing_settings([{'x': 1}, {'x': 1.0}]) == ['x']  # (as written: 1 and 1.0 are not the same text)


def test_runs_table_shows_what_differs(tmp_path):
    for lr in (0.1, 0.01):
        torch.manual_seed(0)
        learner(tmp_path / f'lr{lr}', lr=lr).fit(2)
    torch.manual_seed(0)
    clipped = learner(tmp_path / 'lr0.1-clip')
    from trainer_nb.callback.training import GradientClip
    clipped.fit(2, cbs=GradientClip(max_norm=0.5))
    runs = Runs(tmp_path)
    assert runs.names == ['lr0.01', 'lr0.1', 'lr0.1-clip']
    keys = runs.settings_keys()
    assert keys[0] == 'lr' and 'opt.lr' not in keys  # (the optimizer's lr is the fit's in every run: one column)
    assert 'cbs.GradientClip.max_norm' in keys and 'callbacks' in keys
    assert not any(k.startswith(('model.', 'data.', 'env.', 'seed.')) for k in keys)
    columns, rows = runs.table()
    assert columns[0] == 'run' and columns[-11:] == ['stop', 'fits', 'steps', 'valid/loss', 'valid/r2',
                                                     'best valid/loss', 'best valid/r2', 'samples/s',
                                                     'data ms', 'compute ms', 'peak MB']  # (Throughput's, in short)
    assert all(float(r[columns.index('samples/s')]) > 0 for r in rows)
    assert runs.sort('samples/s').names == runs.sort('perf/samples_per_s').names  # (the header, or the name)
    fastest = [runs.value(r, 'samples/s') for r in runs.sort('samples/s').runs]
    assert fastest == sorted(fastest, reverse=True)  # best first: the most samples a second
    assert [r[columns.index('cbs.GradientClip.max_norm')] for r in rows] == ['-', '-', '0.5']
    assert [r[columns.index('callbacks')] for r in rows] == ['', '', '+GradientClip']  # (what not all runs have)
    # sorted best first: a loss ascending, r2 (better higher) descending
    by_loss = runs.sort('valid/loss')
    assert [runs.value(r, 'valid/loss') for r in by_loss.runs] == sorted(runs.value(r, 'valid/loss') for r in runs.runs)
    by_r2 = runs.sort('best valid/r2')
    assert [runs.value(r, 'best valid/r2') for r in by_r2.runs] == \
        sorted((runs.value(r, 'best valid/r2') for r in runs.runs), reverse=True)
    assert runs.sort('valid/loss', descending=True).names == by_loss.names[::-1]
    assert Runs(tmp_path, 'lr0.1*').names == runs.select('lr0.1*').names == ['lr0.1', 'lr0.1-clip']
    text = str(runs)
    assert text.splitlines()[0].split()[:2] == ['run', 'lr'] and 'lr0.1-clip' in text
    html = runs._repr_html_()
    assert html.startswith('<table>') and '<th>lr</th>' in html and 'widget' not in html


# ---------------------------------------------------------------- damaged and older run folders

def test_runs_over_damaged_folders(tmp_path):
    good = tmp_path / 'good'
    learner(good).fit(1)
    def copy(name): return Path(shutil.copytree(good, tmp_path / name))
    copy('no_run_json').joinpath('run.json').unlink()
    copy('no_metrics').joinpath('metrics.json').unlink()
    copy('empty_run_json').joinpath('run.json').write_text('')
    cut = copy('cut_run_json').joinpath('run.json')
    cut.write_text(cut.read_text()[:-40])
    copy('binary_run_json').joinpath('run.json').write_bytes(b'\x89\xff\x00garbage')
    copy('not_a_record').joinpath('run.json').write_text('[1, 2, 3]')
    bad_entries = copy('bad_entries').joinpath('run.json')
    data = json.loads(bad_entries.read_text())
    data['entries'] = [3, {'settings': 'x', 'best': [1], 'final': None}]
    bad_entries.write_text(json.dumps(data))
    with open(copy('partial_metrics') / 'metrics.json', 'a') as f: f.write('{"iter": 9, "valid/lo')
    lines = (good / 'metrics.json').read_text().splitlines(keepends=True)
    copy('corrupt_metrics').joinpath('metrics.json').write_text(lines[0] + 'oops\n' + ''.join(lines[1:]))
    copy('empty_metrics').joinpath('metrics.json').write_text('')
    (tmp_path / 'not_a_run').mkdir()
    (tmp_path / 'nested' / 'deeper').mkdir(parents=True)
    shutil.copy(good / 'metrics.json', tmp_path / 'nested' / 'deeper' / 'metrics.json')

    runs = Runs(tmp_path)
    assert runs.names == ['bad_entries', 'binary_run_json', 'corrupt_metrics', 'cut_run_json', 'empty_metrics',
                          'empty_run_json', 'good', 'nested/deeper', 'no_metrics', 'no_run_json', 'not_a_record',
                          'partial_metrics']
    notes = dict(n.split(': ', 1) for n in runs.notes())
    assert set(notes) == {'bad_entries', 'binary_run_json', 'corrupt_metrics', 'cut_run_json', 'empty_run_json',
                          'not_a_record', 'partial_metrics'}
    assert notes['empty_run_json'] == 'run.json is empty'
    assert notes['cut_run_json'].startswith('run.json is not JSON (')
    assert notes['binary_run_json'].startswith('run.json cannot be read (')
    assert notes['not_a_record'] == 'run.json holds no list of entries: it is not a trainer_nb run record'
    assert notes['bad_entries'] == 'run.json: 1 of its entries are not objects'
    assert notes['corrupt_metrics'].startswith('metrics.json: line 2, is not JSON (')
    assert notes['partial_metrics'].startswith('metrics.json ends in a line cut short')
    text = str(runs)  # every note under the table, each on its own line
    assert all(f"{name}: {note}" in text.splitlines() for name, note in notes.items())
    assert all(f"<p>{name}: " in runs._repr_html_() for name in notes)
    # what could be read is shown: the results come from metrics.json without a readable run.json
    final = runs['good'].final
    for name in ('no_run_json', 'nested/deeper', 'cut_run_json', 'empty_run_json', 'partial_metrics'):
        assert runs[name].final == final, name
    assert runs['no_metrics'].final == final  # (from run.json)
    assert runs['no_run_json'].stop_reason is None and runs['no_run_json'].steps == 8
    assert runs['corrupt_metrics'].rows == [] and runs['corrupt_metrics'].final == final
    assert runs['bad_entries'].final == final and runs['bad_entries'].stop_reason == 'unfinished'  # (its end: None)
    assert runs.plot('valid/loss')[:4] == b'\x89PNG'
    assert sorted(runs.sort('valid/loss').names) == runs.names and len(runs.table()[1]) == len(runs.names)


def test_an_unfinished_run(tmp_path):
    "A fit killed outright: its entry has no end; the table says 'unfinished' and shows metrics.json's numbers."
    learner(tmp_path / 'run').fit(1)
    path = tmp_path / 'run' / 'run.json'
    data = json.loads(path.read_text())
    data['entries'][0].update(end=None, stop_reason=None, step_end=None, final={}, best={})
    path.write_text(json.dumps(data))
    [run] = Runs(tmp_path).runs
    assert (run.stop_reason, run.steps) == ('unfinished', 8)
    assert set(run.final) == {'valid/loss', 'valid/r2'} and run.best['valid/r2']['mode'] == 'max'


def test_older_runs_sorted_by_their_metrics(tmp_path):
    "Run folders with metrics.json only: their final and best values, sorted best first (NaN and missing last)."
    for name, losses, accs in (('a', (0.9, 0.5), (0.6, 0.7)), ('b', (0.8, 0.2), (0.9, 0.8)),
                               ('c', (0.7, 'nan'), (0.5, 0.9)), ('d', (), ())):
        (tmp_path / name).mkdir()
        rows = [{'iter': 10 * (i + 1), 'valid/loss': loss, 'valid/accuracy': acc} for i, (loss, acc) in
                enumerate(zip(losses, accs))] or [{'iter': 1, 'train/loss': 1.0}]
        (tmp_path / name / 'metrics.json').write_text(''.join(json.dumps(r) + '\n' for r in rows))
    runs = Runs(tmp_path)
    assert runs.columns() == ['run', 'stop', 'fits', 'steps', 'valid/loss', 'valid/accuracy', 'best valid/loss',
                              'best valid/accuracy']
    assert runs['b'].best == {'valid/loss': {'value': 0.2, 'step': 20, 'mode': 'min'},
                              'valid/accuracy': {'value': 0.9, 'step': 10, 'mode': 'max'}}
    assert runs['c'].best['valid/loss'] == {'value': 0.7, 'step': 10, 'mode': 'min'}  # (NaN is never best)
    assert runs.sort('valid/loss').names == ['b', 'a', 'c', 'd']  # (c's final loss is NaN: last with d, who has none)
    assert runs.sort('valid/accuracy').names == ['c', 'b', 'a', 'd']  # (higher is better)
    assert runs.sort('best valid/loss').names == ['b', 'a', 'c', 'd']
    assert runs.sort('valid/accuracy', descending=False).names == ['a', 'b', 'c', 'd']
    assert [line.split() for line in str(runs).splitlines()[2:]][3] == ['d', '-', '0', '1', '-', '-', '-', '-']


def test_runs_refuses_a_missing_folder_and_a_bad_pattern(tmp_path):
    with pytest.raises(FileNotFoundError, match="there is no such folder"): Runs(tmp_path / 'nope')
    (tmp_path / 'a').mkdir()
    (tmp_path / 'a' / 'metrics.json').write_text('{"iter": 1, "valid/loss": 0.5}\n')
    with pytest.raises(TypeError, match="pattern must be a glob pattern"): Runs(tmp_path, 3)
    assert Runs(tmp_path / 'a').names == ['a']  # (one run folder)
    assert Runs(tmp_path, 'b*').notes() == ["No run matches 'b*'; the runs are: a."]
    (tmp_path / 'empty').mkdir()
    assert Runs(tmp_path / 'empty').notes() == \
        [f"No run under {tmp_path / 'empty'}: a run folder holds run.json or metrics.json."]


# ---------------------------------------------------------------- python -m trainer_nb.runs

def cli(*args, cwd):
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')])}
    return subprocess.run([sys.executable, '-m', 'trainer_nb.runs', *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def test_the_command_line(tmp_path):
    for lr in (0.1, 0.01, 0.001):
        learner(tmp_path / 'runs' / f'lr{lr}', lr=lr).fit(1)
    (tmp_path / 'runs' / 'lr0.001' / 'run.json').write_text('{')
    res = cli('runs', cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    assert out[0].split()[:2] == ['run', 'lr']
    assert [line.split()[0] for line in out[2:5]] == ['lr0.001', 'lr0.01', 'lr0.1']
    assert out[-1].startswith('lr0.001: run.json is not JSON')
    runs = Runs(tmp_path / 'runs', 'lr0.0*').sort('valid/loss')
    res = cli('runs', 'lr0.0*', '--sort', 'valid/loss', cwd=tmp_path)
    assert res.returncode == 0 and res.stdout == str(runs) + '\n'
    res = cli('runs', '--sort', 'valid/loss', '--descending', cwd=tmp_path)
    names = [line.split()[0] for line in res.stdout.splitlines()[2:5]]
    assert names == Runs(tmp_path / 'runs').sort('valid/loss', descending=True).names
    res = cli('nope', cwd=tmp_path)
    assert res.returncode == 2 and 'there is no such folder' in res.stderr and res.stdout == ''
    res = cli('runs', '--sort', 'valid/nothing', cwd=tmp_path)
    assert res.returncode == 2 and "No run has a value of 'valid/nothing'" in res.stderr
    assert cli('--help', cwd=tmp_path).returncode == 0
