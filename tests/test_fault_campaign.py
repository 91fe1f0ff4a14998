"""The fault campaign: many seeded faults, each followed by a check that the run is consistent and, resumed, ends
bit-identical to one uninterrupted run (weights, optimizer state, step and sample counts, storage history, and
metrics.json without its timings).

Faults: a SIGINT in training, in validation, during a checkpoint write, at the first and the last batch (in-process
and from-disk resume); `kill -9` of a process that saves every step; a full disk (ENOSPC) during a save; a read-only or
missing run folder; a DataLoader with worker processes across an interrupt; a second Ctrl+C (abort at once).
Each fault's trials and outcomes are counted and printed in one summary line at the end of the module.
"""
import errno
import io
import multiprocessing
import os
import random
import re
import signal
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

import trainer_nb.files as files_module
from trainer_nb.callback.checkpoint import CheckpointCallback
from trainer_nb.callback.core import Callback
from trainer_nb.checkpoint import load_checkpoint
from trainer_nb.learner import Learner
from trainer_nb.metrics import accuracy
from trainer_nb.writers import read_metrics
from resume_harness import (BS, N_EPOCHS, N_VALID, STEPS_PER_EPOCH, Interrupter, Noise, assert_same_run, data,
                            make_learner, run_fit, sigint)

TOTAL_STEPS = N_EPOCHS * STEPS_PER_EPOCH
VALID_BATCHES = N_VALID // BS
EVENTS = ('before_batch', 'after_loss', 'after_step', 'after_batch')
N_SAVES = TOTAL_STEPS // 7 + 1  # the periodic saves of the harness (every 7 steps), and `last` at the end

RESULTS: dict[str, list[int]] = {}  # fault -> [trials, consistent and bit-identical]
DETAILS: dict[str, str] = {}  # fault -> a breakdown of its trials


def record(fault: str, trials: int, good: int) -> str:
    RESULTS[fault] = [trials, good]
    return f"{fault}: {good}/{trials} trials consistent and bit-identical"


@pytest.fixture(scope='module', autouse=True)
def campaign_summary(request):
    yield
    line = 'fault campaign: ' + '; '.join(f"{k} {g}/{t}" + (f" ({DETAILS[k]})" if k in DETAILS else '')
                                          for k, (t, g) in RESULTS.items()) + \
        f"; total {sum(g for _, g in RESULTS.values())}/{sum(t for t, _ in RESULTS.values())} trials consistent " \
        "and bit-identical"
    capture = request.config.pluginmanager.getplugin('capturemanager')
    if capture is None: print(line)
    else:
        with capture.global_and_fixture_disabled(): print('\n' + line)  # shown even without -s


@pytest.fixture(scope='module', autouse=True)
def one_thread():
    "One intra-op thread: these tiny models run 10x faster on a shared, busy machine (the reference runs so too)."
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope='module')
def reference(tmp_path_factory):
    "One uninterrupted run of the harness, shared by every trial; its metrics.json too."
    learn = make_learner(tmp_path_factory.mktemp('reference'))
    run_fit(learn)
    assert learn.stop_reason == 'completed' and learn.step == TOTAL_STEPS
    return learn


def without_times(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith(('time/', 'perf/'))} for r in records]


def assert_same_metrics_file(run_path: Path, reference) -> None:
    "metrics.json: each step once, in order, each value at its own step: the reference's file, timings excluded."
    records = read_metrics(Path(run_path) / 'metrics.json')
    iters = [r['iter'] for r in records]
    assert iters == sorted(set(iters)), f"steps repeated or out of order: {iters}"
    assert without_times(records) == without_times(read_metrics(reference.path / 'metrics.json'))


def stray_files(folder: Path) -> list[str]:
    "Temp files of writers (atomic writes, hard links) left in a checkpoints folder."
    folder = Path(folder)
    if not folder.is_dir(): return []
    return sorted(p.name for p in folder.iterdir() if p.name.startswith('.') and ('.tmp-' in p.name or '.link-' in p.name))


def interrupting_save(monkeypatch, when):
    """Make `torch.save` (the write inside `atomic_write`) send a SIGINT halfway through writing its bytes,
    on the calls for which `when(n)` is true (n counts the calls from 1). Returns the call counter."""
    real_save, calls = torch.save, {'n': 0}

    def save(obj, f, *args, **kwargs):
        calls['n'] += 1
        if not when(calls['n']) or not hasattr(f, 'write'): return real_save(obj, f, *args, **kwargs)
        buf = io.BytesIO()
        real_save(obj, buf, *args, **kwargs)
        data_ = buf.getvalue()
        f.write(data_[:len(data_) // 2])
        sigint()  # the handler runs here, with half the file written
        f.write(data_[len(data_) // 2:])

    monkeypatch.setattr(torch, 'save', save)
    return calls


# --- 1. SIGINT at random points: training, validation, checkpoint writes, the first and the last batch ---

def sigint_trials(n: int = 150, seed: int = 2026) -> list[tuple]:
    rng = random.Random(seed)
    trials = []
    for i in range(n):
        kind = ('train', 'valid', 'ckpt', 'first', 'last')[i % 5]
        if kind == 'train': point = ('train', rng.choice(EVENTS), rng.randint(2, TOTAL_STEPS - 2))
        elif kind == 'valid': point = ('valid', rng.randint(0, N_EPOCHS - 1), rng.randint(0, VALID_BATCHES - 1))
        elif kind == 'ckpt': point = ('ckpt', rng.randint(1, N_SAVES - 1))  # the n-th save while training
        elif kind == 'first':  # during the first batch: before its step (step 0) or after it (step 1)
            event = rng.choice(EVENTS)
            point = ('train', event, 0 if event in ('before_batch', 'after_loss') else 1)
        else:  # during the last batch of the fit
            event = rng.choice(EVENTS)
            point = ('train', event, TOTAL_STEPS - 1 if event in ('before_batch', 'after_loss') else TOTAL_STEPS)
        mode = 'disk' if rng.random() < 0.4 else 'memory'
        trials.append((kind, mode, point))
    return trials


SIGINT_TRIALS = sigint_trials()


def run_sigint_trial(path: Path, mode: str, point: tuple, monkeypatch):
    "Fit with one SIGINT at `point`; resume (in process, or from `last` in a fresh learner) until completed."
    interrupter = Interrupter([point])
    if point[0] == 'ckpt': interrupting_save(monkeypatch, lambda n: n == point[1])
    learn = make_learner(path)
    learn.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[interrupter])
    stops = 0
    while learn.stop_reason != 'completed':
        assert learn.stop_reason == 'interrupted' and learn.fit_state.resumable, \
            f"stopped with {learn.stop_reason!r}, resumable={learn.fit_state.resumable}"
        stops += 1
        assert stops == 1, "more stops than interrupts"
        assert not stray_files(path / 'checkpoints'), stray_files(path / 'checkpoints')
        if mode == 'disk':
            learn = make_learner(path, seed=99)  # another seed: everything must come from the file
            learn.load('last')
            assert learn.fit_state.resumable
            learn.resume(cbs=[interrupter])
        else:
            learn.resume()
    assert stops == 1, "the interrupt did not stop the fit"
    if point[0] != 'ckpt': assert interrupter.fired == [point], "the interrupt was never sent"
    return learn


@pytest.mark.slow
def test_sigint_campaign(tmp_path, reference, monkeypatch):
    failures, kinds = [], {}
    for i, (kind, mode, point) in enumerate(SIGINT_TRIALS):
        path = tmp_path / f"t{i:03d}"
        try:
            with monkeypatch.context() as m:
                learn = run_sigint_trial(path, mode, point, m)
            assert_same_run(learn, reference)
            assert_same_metrics_file(path, reference)
            assert not stray_files(path / 'checkpoints')
            kinds.setdefault(kind, [0, 0])[1] += 1
        except Exception as e:
            failures.append(f"trial {i} {kind} {mode} {point}: {type(e).__name__}: {e}")
        kinds.setdefault(kind, [0, 0])[0] += 1
    modes = [m for _, m, _ in SIGINT_TRIALS]
    DETAILS['SIGINT'] = ', '.join(f"{k} {g}/{t}" for k, (t, g) in kinds.items()) + \
        f"; resumed from disk {modes.count('disk')}, in process {modes.count('memory')}"
    summary = record('SIGINT', len(SIGINT_TRIALS), len(SIGINT_TRIALS) - len(failures)) + f" ({DETAILS['SIGINT']})"
    assert len(SIGINT_TRIALS) >= 100 and not failures, summary + '\n' + '\n'.join(failures)


# --- 2. kill -9 of a process that saves every step ---

HIDDEN = 1024  # ~1.1M parameters: a checkpoint of ~13 MB (weights and AdamW state), a few ms to write


def big_learner(path, seed=0, cbs=()):
    "The harness with a wide model, saving a checkpoint after every step."
    torch.manual_seed(seed); np.random.seed(seed); random.seed(seed)
    train, valid = data()
    model = nn.Sequential(nn.Linear(8, HIDDEN), nn.ReLU(), nn.Dropout(0.2), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                          nn.Linear(HIDDEN, 3))
    return Learner(model, (DataLoader(train, batch_size=BS, shuffle=True), DataLoader(valid, batch_size=BS)),
                   nn.functional.cross_entropy, metrics=[accuracy], lr=1e-3, path=path, progress=False,
                   cbs=[Noise(), CheckpointCallback(every_steps=1, keep=2), *cbs])


class Ready(Callback):
    "Tell the parent that this process has trained a batch and saved it (after the checkpoint callback)."
    order = 100
    def __init__(self, event=None): self.event = event
    def after_batch(self):
        if self.event is not None and self.learn.training: self.event.set()


def train_or_resume(path, ready):
    "The child: resume the run from `last` if there is one (exit 0 if it had completed), else start it."
    try:
        learn = big_learner(path, cbs=[Ready(ready)])
        if (Path(path) / 'checkpoints' / 'last.pt').exists():
            learn.load('last')
            if learn.stop_reason != 'completed': learn.resume()
        else:
            learn.fit(N_EPOCHS)
        os._exit(0 if learn.stop_reason == 'completed' else 3)
    except BaseException:
        traceback.print_exc()
        os._exit(1)


@pytest.mark.slow
def test_kill_9_campaign(tmp_path):
    reference = big_learner(tmp_path / 'reference')
    reference.fit(N_EPOCHS)
    ctx, rng = multiprocessing.get_context('fork'), random.Random(99)
    kills = good = chains = mid_write = metrics_ok = 0
    failures, chain, pids = [], 0, []
    path = tmp_path / 'chain0'

    def check_finished_chain():
        done = big_learner(tmp_path / 'check', seed=99).load(path / 'checkpoints' / 'last.pt')
        assert done.stop_reason == 'completed'
        assert_same_run(done, reference)
        assert not stray_files(path / 'checkpoints'), stray_files(path / 'checkpoints')
        try: assert_same_metrics_file(path, reference)  # not asserted: see test_resume_from_before_the_first_metrics_write
        except AssertionError: return 0
        return 1

    deadline = time.monotonic() + 150
    while kills < 100:
        assert time.monotonic() < deadline, f"too slow: {kills} kills"
        ready = ctx.Event()
        proc = ctx.Process(target=train_or_resume, args=(path, ready))
        proc.start()
        t0 = time.monotonic()
        while not ready.wait(0.005) and proc.is_alive() and time.monotonic() - t0 < 60: pass
        if ready.is_set():
            time.sleep(rng.uniform(0.05, 0.15))
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(60)
        if proc.exitcode == -signal.SIGKILL:
            kills += 1
            pids.append(proc.pid)
            try:
                if any(name.endswith(f'-{proc.pid}') for name in stray_files(path / 'checkpoints')): mid_write += 1
                fresh = big_learner(tmp_path / 'check', seed=99).load(path / 'checkpoints' / 'last.pt')
                assert fresh.fit_state.resumable or fresh.stop_reason == 'completed'
                assert 1 <= fresh.step <= TOTAL_STEPS
                good += 1
            except Exception as e:
                failures.append(f"kill {kills} (pid {proc.pid}): {type(e).__name__}: {e}")
        elif proc.exitcode == 0:  # the chain completed: its end must be the uninterrupted run's, with no strays
            try:
                metrics_ok += check_finished_chain()
                chains += 1
            except Exception as e:
                failures.append(f"chain {chain}: {type(e).__name__}: {e}")
            chain += 1
            path = tmp_path / f"chain{chain}"
        else:
            pytest.fail(f"the training process failed (exit code {proc.exitcode})")
    # finish the last chain without a kill: `last` resumes to the end of the uninterrupted run
    proc = ctx.Process(target=train_or_resume, args=(path, ctx.Event()))
    proc.start(); proc.join(120)
    assert proc.exitcode == 0
    try:
        metrics_ok += check_finished_chain()
        chains += 1
    except Exception as e:
        failures.append(f"last chain: {type(e).__name__}: {e}")
    DETAILS['kill -9'] = f"{mid_write} kills left a temp file of the killed writer; {chains}/{chain + 1} chains " \
        f"resumed to a bit-identical end; metrics.json equal to the reference's in {metrics_ok}/{chain + 1}"
    summary = record('kill -9', kills, good if chains == chain + 1 else 0) + f" ({DETAILS['kill -9']})"
    assert not failures and mid_write > 0 and chains == chain + 1, summary + '\n' + '\n'.join(failures)


def kill_between_link_and_rename(path):
    "A child that saves periodic checkpoints and is killed (by itself) between the hard link and the rename of `last`."
    real_replace = os.replace
    def replace(src, dst, *a, **k):
        if '.link-' in str(src): os.kill(os.getpid(), signal.SIGKILL)
        return real_replace(src, dst, *a, **k)
    os.replace = replace
    try:
        make_learner(path).fit(1)
    finally:
        os._exit(1)


def test_kill_between_link_and_rename_leaves_no_stray_link(tmp_path):
    proc = multiprocessing.get_context('fork').Process(target=kill_between_link_and_rename, args=(tmp_path,))
    proc.start(); proc.join(60)
    assert proc.exitcode == -signal.SIGKILL
    assert any('.link-' in n for n in stray_files(tmp_path / 'checkpoints'))  # the fault did land there
    learn = make_learner(tmp_path, seed=99)
    learn.fit(1)  # saves every 7 steps and `last`: the dead writer's temp must be gone after these saves
    assert not stray_files(tmp_path / 'checkpoints'), stray_files(tmp_path / 'checkpoints')


# --- 3. A full disk (ENOSPC) during a save ---

def enospc():
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def full_disk(monkeypatch, save_no: int, where: str):
    """From the `save_no`-th checkpoint write on, the disk is full: a write (of a checkpoint, or of run.json) fails
    after `where` bytes ('0', '4k') or the fsync fails ('fsync'), as it does on filesystems that report the lack of
    space late."""
    calls = {'n': 0}
    real_open, real_fsync = open, os.fsync

    class FullFile(io.FileIO):
        budget = None
        def write(self, b):
            if self.budget is not None:
                if len(b) > self.budget:
                    super().write(bytes(b)[:self.budget]); self.budget = 0
                    raise enospc()
                self.budget -= len(b)
            return super().write(b)

    def fake_open(file, mode='r', *args, **kwargs):
        if mode != 'wb': return real_open(file, mode, *args, **kwargs)
        if '.pt.tmp-' in str(file): calls['n'] += 1  # (a checkpoint's temp file is counted; run.json fails too, once full)
        f = FullFile(file, 'wb')
        if calls['n'] >= save_no and where != 'fsync': f.budget = 0 if where == '0' else 4096
        return f

    def fake_fsync(fd):
        if where == 'fsync' and calls['n'] >= save_no and not os.path.isdir(f'/proc/self/fd/{fd}'): raise enospc()
        return real_fsync(fd)

    monkeypatch.setattr(files_module, "open", fake_open, raising=False)
    monkeypatch.setattr(os, 'fsync', fake_fsync)


ENOSPC_CASES = [(2, '0'), (2, '4k'), (3, 'fsync'), (4, '4k'), (5, '0'), (1, 'fsync')]


@pytest.mark.parametrize('save_no,where', ENOSPC_CASES)
def test_full_disk_during_a_save(tmp_path, reference, monkeypatch, save_no, where):
    ok = False
    try:
        ckpts = tmp_path / 'checkpoints'
        with monkeypatch.context() as m:
            full_disk(m, save_no, where)
            learn = make_learner(tmp_path)
            with pytest.raises(Exception) as info:  # what it says: test_full_disk_error_is_clear
                run_fit(learn)
        assert learn.stop_reason == 'error' and not learn.fit_state.resumable
        assert not stray_files(ckpts), f"temp file left: {stray_files(ckpts)}"
        failed_at = 7 * save_no  # the save that failed was of this step
        assert not (ckpts / f'step_{failed_at:07d}.pt').exists()
        if save_no == 1:
            assert not (ckpts / 'last.pt').exists()  # nothing was saved yet, and nothing half-written appeared
        else:
            last = load_checkpoint(ckpts / 'last.pt')  # the previous checkpoint is intact
            assert last['fit_state']['step'] == failed_at - 7 and last['fit_state']['resumable']
            # space is freed: the run continues from it to the uninterrupted run's end
            resumed = make_learner(tmp_path, seed=99).load('last')
            resumed.resume()
            assert_same_run(resumed, reference)
            if failed_at - 7 >= FIRST_WRITE:  # (before: see test_resume_from_before_the_first_metrics_write)
                assert_same_metrics_file(tmp_path, reference)
        ok = True
    finally:
        t, g = RESULTS.get('ENOSPC', [0, 0])
        RESULTS['ENOSPC'] = [t + 1, g + ok]


FIRST_WRITE = STEPS_PER_EPOCH  # metrics.json is first written after the first validation (log_every=20 > 12 steps)


class CrashAt(Callback):
    order = -20
    def __init__(self, step): self.step = step
    def after_step(self):
        if self.learn.step == self.step: raise RuntimeError('crash')


def test_resume_from_before_the_first_metrics_write(tmp_path, reference):
    learn = make_learner(tmp_path)
    with pytest.raises(RuntimeError, match='crash'):
        learn.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[CrashAt(FIRST_WRITE + 2)])  # a crash after the first write
    assert load_checkpoint(tmp_path / 'checkpoints' / 'last.pt')['fit_state']['step'] == 7  # before the first write
    resumed = make_learner(tmp_path, seed=99).load('last')
    resumed.resume(cbs=[CrashAt(-1)])
    assert_same_run(resumed, reference)  # the training itself is exact...
    assert_same_metrics_file(tmp_path, reference)  # ...and metrics.json has each step once (the writer cut the file back)


@pytest.mark.parametrize('where', ['0', '4k'])
def test_full_disk_error_is_clear(tmp_path, monkeypatch, where):
    full_disk(monkeypatch, 2, where)
    learn = make_learner(tmp_path)
    with pytest.raises(Exception) as info:
        run_fit(learn)
    text = ''.join(traceback.format_exception_only(info.value))  # the message and its notes
    assert isinstance(info.value, OSError) and info.value.errno == errno.ENOSPC, text
    assert 'No space left on device' in text and 'step_0000014.pt' in text, text


# --- 4. A read-only or missing run folder ---

def test_missing_run_folder_is_made(tmp_path, reference):
    path = tmp_path / 'not' / 'yet' / 'there'
    learn = make_learner(path)
    run_fit(learn)
    assert (path / 'metrics.json').is_file() and (path / 'checkpoints' / 'last.pt').is_file()
    assert_same_run(learn, reference)
    RESULTS['missing folder'] = [1, 1]


def read_only_cases(tmp_path, monkeypatch):
    yield 'sysfs', Path('/sys/trainer_nb_fault_campaign/run')  # mkdir there fails, even as root
    real = tempfile.TemporaryFile
    def erofs(*args, dir=None, **kwargs):
        if dir is not None and Path(dir) == tmp_path / 'ro': raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        return real(*args, dir=dir, **kwargs)
    monkeypatch.setattr(tempfile, 'TemporaryFile', erofs)
    (tmp_path / 'ro').mkdir()
    yield 'read-only filesystem', tmp_path / 'ro'


def test_read_only_run_folder_is_refused_at_fit_start(tmp_path, monkeypatch):
    trials = good = 0
    for name, path in read_only_cases(tmp_path, monkeypatch):
        trials += 1
        learn = make_learner(path)  # made: the folder is only written during a fit
        before = {k: v.clone() for k, v in learn.model.state_dict().items()}
        with pytest.raises(PermissionError, match=re.escape(f"The run folder {path} cannot be written (") + r".*Learner\(path=\.\.\.\)"):
            run_fit(learn)
        assert learn.step == 0 and all(torch.equal(v, learn.model.state_dict()[k]) for k, v in before.items())
        assert learn.stop_reason == 'error'
        good += 1
    assert trials == 2
    RESULTS['read-only folder'] = [trials, good]


# --- 5. DataLoader workers across an interrupt ---

def worker_learner(path, seed=0, cbs=()):
    torch.manual_seed(seed); np.random.seed(seed); random.seed(seed)
    train, valid = data()
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 3))
    dls = (DataLoader(train, batch_size=BS, shuffle=True, num_workers=2),
           DataLoader(valid, batch_size=BS, num_workers=2))
    return Learner(model, dls, nn.functional.cross_entropy, metrics=[accuracy], lr=1e-2, path=path, progress=False,
                   cbs=[Noise(), CheckpointCallback(every_steps=7), *cbs])


@pytest.mark.slow
def test_dataloader_workers_across_interrupt_and_resume(tmp_path):
    reference = worker_learner(tmp_path / 'reference')
    run_fit(reference)
    trials = [('memory', ('train', 'after_batch', 17)), ('disk', ('valid', 1, 2)), ('disk', ('train', 'after_loss', 5))]
    good, failures = 0, []
    for i, (mode, point) in enumerate(trials):
        path = tmp_path / f"w{i}"
        try:
            interrupter = Interrupter([point])
            learn = worker_learner(path)
            learn.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[interrupter])
            assert learn.stop_reason == 'interrupted' and learn.fit_state.resumable
            if mode == 'disk':
                learn = worker_learner(path, seed=99).load('last')
                learn.resume(cbs=[interrupter])
            else:
                learn.resume()
            assert_same_run(learn, reference)
            assert_same_metrics_file(path, reference)
            good += 1
        except Exception as e:
            failures.append(f"{mode} {point}: {type(e).__name__}: {e}")
    summary = record('num_workers=2', len(trials), good)
    assert not failures, summary + '\n' + '\n'.join(failures)


# --- 6. A second Ctrl+C aborts at once; `last` on disk stays the last good one (and a fit stopped before it resumes) ---

class DoubleInterrupt(Callback):
    """A first SIGINT at step `step`, then a second: in the same batch ('batch'), or during the next checkpoint write
    (the periodic one of this batch, 'periodic'; `last` at the end of the stopped fit, 'last')."""
    order = -20
    def __init__(self, kind, step, arm):
        self.kind, self.step, self.arm, self.done = kind, step, arm, False
    def after_loss(self):
        if self.done or not self.learn.training or self.learn.step != self.step or self.kind == 'periodic': return
        self.done = True
        sigint()
        if self.kind == 'batch': sigint()
        else: self.arm['on'] = True
    def after_batch(self):
        if self.done or not self.learn.training or self.learn.step != self.step or self.kind != 'periodic': return
        self.done = True
        sigint(); self.arm['on'] = True


def double_trials(seed=5):
    rng = random.Random(seed)
    trials = [('batch', rng.randint(8, TOTAL_STEPS - 1)) for _ in range(3)]
    trials += [('periodic', 7 * rng.randint(2, TOTAL_STEPS // 7)) for _ in range(3)]
    trials += [('last', s) for s in rng.sample([s for s in range(8, TOTAL_STEPS - 1) if (s + 1) % 7], 3)]
    return trials


@pytest.mark.parametrize('kind,step', double_trials())
def test_second_ctrl_c_aborts_at_once_and_last_stays_good(tmp_path, reference, monkeypatch, kind, step):
    ok = False
    try:
        before = signal.getsignal(signal.SIGINT)
        arm = {'on': False}
        def when(n):
            if arm['on']: arm['on'] = False; return True
            return False
        interrupting_save(monkeypatch, when)
        learn = make_learner(tmp_path)
        with pytest.raises(KeyboardInterrupt):
            learn.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[DoubleInterrupt(kind, step, arm)])
        monkeypatch.undo()
        assert signal.getsignal(signal.SIGINT) is before
        # in a batch, the fit cannot be resumed; in the save of `last`, the stop was made: resumable in the process
        assert learn.stop_reason == 'interrupted' and learn.fit_state.resumable == (kind == 'last')
        # at once: in the batch, its step never happened; in a save: no more batches ran
        assert learn.step == (step if kind == 'batch' else step + (kind == 'last'))
        ckpts = tmp_path / 'checkpoints'
        assert not stray_files(ckpts), stray_files(ckpts)
        good_step = 7 * ((learn.step - (kind == 'periodic')) // 7)  # the last checkpoint that was completed
        last = make_learner(tmp_path, seed=99).load('last')
        assert last.fit_state.resumable and last.step == good_step, (last.step, good_step)
        last.resume(cbs=[DoubleInterrupt(kind, -1, {})])
        assert_same_run(last, reference)
        if good_step >= FIRST_WRITE:  # (before: see test_resume_from_before_the_first_metrics_write)
            assert_same_metrics_file(tmp_path, reference)
        if kind == 'last':  # (and in the process, from where it stopped: the second interrupt cut only the save short)
            learn.resume(cbs=[DoubleInterrupt(kind, -1, {})])  # (its lines go into the same metrics.json: checked above)
            assert_same_run(learn, reference)
        ok = True
    finally:
        t, g = RESULTS.get('second Ctrl+C', [0, 0])
        RESULTS['second Ctrl+C'] = [t + 1, g + ok]
