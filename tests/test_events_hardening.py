"""Hardening of the events chapter and of the trackers' arguments.

- `put_scalar` refuses, naming the scalar, what is not one number; it keeps device tensors unsynchronised.
- Smoothing lives in one place (`EventStorage.smoothed`), which every writer uses.
- `metrics.json` holds each value under the iteration it was logged at, one record per iteration, also after an
  interrupt and a resume (in memory, or from a checkpoint on disk).
- `EarlyStopping` and `ReduceLROnPlateau` check their arguments when they are made.
"""
import math
import statistics

import numpy as np
import pytest
import torch

from trainer_nb.callback.core import LambdaCallback
from trainer_nb.callback.recorder import Recorder, WriterCallback
from trainer_nb.callback.tracker import EarlyStopping, ReduceLROnPlateau
from trainer_nb.events import EventStorage
from trainer_nb.writers import ConsoleWriter, JSONWriter, read_metrics
from trainer_nb.testing import synth_learner

WINDOW = 1  # JSONWriter's default smoothing window: values as logged


# --- put_scalar: what it refuses, and how it says so ---

@pytest.mark.parametrize('value,error,words', [
    ('hello', TypeError, ["put_scalar('my_metric'", "got str 'hello'"]),
    ('3.5', TypeError, ["put_scalar('my_metric'", "got str '3.5'", 'float(']),
    (None, TypeError, ["put_scalar('my_metric'", 'got None']),
    ([1.0], TypeError, ["put_scalar('my_metric'", 'got list']),
    (1 + 2j, TypeError, ["put_scalar('my_metric'", 'got complex']),
    (torch.tensor(1 + 2j), TypeError, ["put_scalar('my_metric'", 'complex']),
    (torch.ones(3), ValueError, ["put_scalar('my_metric'", 'shape (3,)', 'mean()']),
    (torch.ones(0), ValueError, ["put_scalar('my_metric'", 'shape (0,)']),
    (np.ones(3), ValueError, ["put_scalar('my_metric'", 'shape (3,)']),
    (np.array(['a']), TypeError, ["put_scalar('my_metric'", 'ndarray']),
])
def test_put_scalar_refuses_what_is_not_one_number(value, error, words):
    storage = EventStorage()
    with pytest.raises(error) as info:
        storage.put_scalar('my_metric', value)
    for w in words: assert w in str(info.value)
    assert 'my_metric' not in storage.histories()  # nothing half-recorded


@pytest.mark.parametrize('name,error', [('', ValueError), (None, TypeError), (3, TypeError), (b'loss', TypeError)])
def test_put_scalar_refuses_a_name_that_is_not_a_nonempty_string(name, error):
    with pytest.raises(error, match='name must be a non-empty string'):
        EventStorage().put_scalar(name, 1.0)


def test_put_scalars_names_the_bad_scalar():
    with pytest.raises(TypeError, match=r"put_scalar\('acc'"):
        EventStorage().put_scalars(loss=1.0, acc='0.9')


@pytest.mark.parametrize('value,expected', [
    (3, 3.0), (2.5, 2.5), (True, 1.0), (False, 0.0), (float('nan'), float('nan')),
    (np.float32(0.5), 0.5), (np.float64(0.25), 0.25), (np.int64(7), 7.0), (np.bool_(True), 1.0),
    (np.array(1.5), 1.5), (np.array([[2.0]]), 2.0),
    (torch.tensor(1.5), 1.5), (torch.tensor([[4]]), 4.0), (torch.tensor(True), 1.0),
    (torch.tensor(2.0, requires_grad=True) * 2, 4.0),
])
def test_put_scalar_accepts_numbers_numpy_scalars_and_one_element_tensors(value, expected):
    storage = EventStorage()
    storage.put_scalar('x', value)
    got = storage.history('x').latest()
    assert type(got) is float
    assert (math.isnan(got) and math.isnan(expected)) or got == expected


def test_put_scalar_leaves_device_tensors_unread():
    # A meta tensor has no data: `.item()` on it raises, so this fails if put_scalar reads a non-CPU tensor.
    storage = EventStorage()
    storage.put_scalar('x', torch.tensor(1.0, device='meta'))
    history = storage.history('x')
    assert (history.count, len(history._pending)) == (1, 1)


# --- smoothing in one place ---

def test_every_writer_smooths_through_storage_smoothed(tmp_path, monkeypatch):
    storage = EventStorage()
    for it in range(1, 4):
        storage.iter = it
        storage.put_scalar('train/loss', float(it))
    calls = []

    def fake_smoothed(self, name, window=20, last=1):
        calls.append((name, window, last))
        return [(42.0, it) for it in range(4 - last, 4)]

    monkeypatch.setattr(EventStorage, 'smoothed', fake_smoothed)
    lines = []
    ConsoleWriter(window=5, print_fn=lines.append).write(storage)
    writer = JSONWriter(tmp_path / 'metrics.json', window=7)
    writer.write(storage); writer.close()
    assert lines == ['iter: 3  train/loss: 42']
    assert read_metrics(tmp_path / 'metrics.json') == [{'iter': i, 'train/loss': 42.0} for i in (1, 2, 3)]
    assert calls == [('train/loss', 5, 1), ('train/loss', 7, 3)]  # (JSONWriter: the 3 new values)


def test_smoothed_is_the_median_of_the_window_ending_at_each_value():
    storage = EventStorage()
    values = [5., 1., 4., 2., 3., 9.]
    for it, v in enumerate(values):
        storage.iter = it
        storage.put_scalar('noisy', v)
        storage.put_scalar('lr', v, smoothing_hint=False)
    expected = [statistics.median(values[max(i - 2, 0):i + 1]) for i in range(len(values))]
    assert storage.smoothed('noisy', window=3, last=6) == list(zip(expected, range(6)))
    assert storage.smoothed('noisy', window=3, last=2) == list(zip(expected[-2:], [4, 5]))
    assert storage.smoothed('noisy', window=3, last=100) == list(zip(expected, range(6)))
    assert storage.smoothed('lr', window=3, last=2) == [(3., 4), (9., 5)]
    assert storage.latest_with_smoothing_hint(3) == {'noisy': (expected[-1], 5), 'lr': (9., 5)}


# --- metrics.json from real fits ---

def expected_records(storage, window: int = WINDOW, skip=('time/', 'perf/')) -> list[dict]:
    "What metrics.json must hold, worked out from the storage's histories independently of the writers."
    hints, by_iter = storage.smoothing_hints(), {}
    for name, history in storage.histories().items():
        if name.startswith(skip): continue
        values = history.values()
        for i, (value, it) in enumerate(values):
            if hints[name]: value = statistics.median(v for v, _ in values[max(i - window + 1, 0):i + 1])
            by_iter.setdefault(it, {})[name] = value
    return [{'iter': it, **by_iter[it]} for it in sorted(by_iter)]


def without_times(records: list[dict]) -> list[dict]:
    "Records without the timings, which differ from one run to the next."
    return [{k: v for k, v in r.items() if not k.startswith(('time/', 'perf/'))} for r in records]


def writer_learner(path, n_valid=64, log_every=5, cbs=(), window=WINDOW):
    writer = WriterCallback([JSONWriter(path / 'metrics.json', window=window)], log_every=log_every)
    return synth_learner(n_valid=n_valid, cbs=[Recorder(), writer, *cbs], path=path)


@pytest.mark.parametrize('n_valid,window', [(0, WINDOW), (64, WINDOW), (64, 20)])
def test_metrics_json_has_each_value_under_the_iteration_it_was_logged_at(tmp_path, n_valid, window):
    # 8 steps per epoch and a write every 5 steps: most values are written a few steps after they were logged.
    # (window: the values as logged, the default, or smoothed by a running median of 20)
    learn = writer_learner(tmp_path, n_valid=n_valid, log_every=5, window=window)
    learn.fit(3)
    records = read_metrics(tmp_path / 'metrics.json')
    iters = [r['iter'] for r in records]
    assert iters == list(range(1, 25))  # each step once, in order
    assert without_times(records) == expected_records(learn.storage, window)
    # the epoch number sits at the last step of its epoch (before the fix: at the step of the next write)
    assert [(r['iter'], r['epoch']) for r in records if 'epoch' in r] == [(8, 1.0), (16, 2.0), (24, 3.0)]
    if n_valid:
        valid = learn.storage.history('valid/loss').values()
        assert [(r['iter'], r['valid/loss']) for r in records if 'valid/loss' in r] == [(it, v) for v, it in valid]


def stop_once_at(step: int) -> LambdaCallback:
    "A callback that asks the fit to stop (as the Stop button or Ctrl-C do) after step `step`, once."
    asked = []
    def maybe_stop(learn):
        if learn.step == step and not asked:
            asked.append(step)
            learn.request_stop()
    return LambdaCallback(after_batch=maybe_stop)


@pytest.mark.parametrize('stop_at', [3, 8, 13])
def test_metrics_json_after_an_interrupt_and_resume_equals_an_uninterrupted_fit(tmp_path, stop_at):
    reference = writer_learner(tmp_path / 'reference')
    reference.fit(3)
    learn = writer_learner(tmp_path / 'resumed', cbs=[stop_once_at(stop_at)])
    learn.fit(3)
    assert (learn.stop_reason, learn.step) == ('interrupted', stop_at)
    learn.resume()
    assert learn.stop_reason == 'completed'
    records = read_metrics(tmp_path / 'resumed' / 'metrics.json')
    assert [r['iter'] for r in records] == list(range(1, 25))
    assert without_times(records) == without_times(read_metrics(tmp_path / 'reference' / 'metrics.json'))


class Crash(Exception): pass


def crash_at(step: int) -> LambdaCallback:
    "A callback that makes the fit fail after step `step`: the process dies there, say."
    def crash(learn):
        if learn.training and learn.step == step: raise Crash(f"crash at step {step}")
    return LambdaCallback(after_batch=crash, order=95)  # after the Recorder and the writers have done that step


def test_metrics_json_after_resuming_from_an_older_checkpoint(tmp_path):
    # A stop in the middle of the first validation (step 8), saved to disk; the run resumes in memory, which
    # redoes the validation and adds its values to the line of step 8, then dies at step 13. Resumed from the
    # checkpoint of step 8, the run must cut metrics.json back to what it was at that checkpoint (the line
    # of step 8 without the validation included), and carry on from there.
    reference = writer_learner(tmp_path / 'reference', log_every=4)
    reference.fit(3)
    path = tmp_path / 'run'
    asked = []
    def stop_in_validation(learn):
        if not learn.training and learn.step == 8 and not asked:
            asked.append(True)
            learn.request_stop()
    learn = writer_learner(path, log_every=4, cbs=[LambdaCallback(after_batch=stop_in_validation)])
    learn.fit(3)
    assert (learn.stop_reason, learn.step) == ('interrupted', 8)
    assert 'valid/loss' not in read_metrics(path / 'metrics.json')[-1]
    learn.save('stop')
    with pytest.raises(Crash): learn.resume(cbs=[crash_at(13)])
    records = read_metrics(path / 'metrics.json')
    assert [r['iter'] for r in records] == list(range(1, 14)) and 'valid/loss' in records[7]
    learn = writer_learner(path, log_every=4)
    learn.load('stop')
    learn.resume()
    assert learn.stop_reason == 'completed'
    records = read_metrics(path / 'metrics.json')
    assert [r['iter'] for r in records] == list(range(1, 25))
    assert without_times(records) == without_times(read_metrics(tmp_path / 'reference' / 'metrics.json'))
    assert without_times(records) == expected_records(learn.storage)


def test_a_resumed_writer_cuts_the_file_back_to_its_checkpoint(tmp_path):
    # The checkpoint is saved after the line of iteration 2 was written; the run then adds a value to that
    # line (which grows) and writes iteration 3. Resumed from the checkpoint, the writer must restore the file
    # as it was, line 2 included, whatever comes next.
    storage, writer = EventStorage(), JSONWriter(tmp_path / 'metrics.json')
    for it in (1, 2):
        storage.iter = it
        storage.put_scalar('lr', 0.1 * it, smoothing_hint=False)
    writer.write(storage)
    at_checkpoint = (tmp_path / 'metrics.json').read_text()
    saved = storage.state_dict(), writer.state_dict()
    storage.put_scalar('valid/loss', 0.5, smoothing_hint=False)
    storage.iter = 3
    storage.put_scalar('lr', 0.3, smoothing_hint=False)
    writer.write(storage); writer.close()
    assert [r['iter'] for r in read_metrics(tmp_path / 'metrics.json')] == [1, 2, 3]
    storage, writer = EventStorage(), JSONWriter(tmp_path / 'metrics.json')
    storage.load_state_dict(saved[0]); writer.load_state_dict(saved[1])
    writer.write(storage)  # nothing new: the file is not even opened
    assert (tmp_path / 'metrics.json').read_text() != at_checkpoint
    storage.iter = 3
    storage.put_scalar('lr', 0.25, smoothing_hint=False)
    writer.write(storage); writer.close()
    assert read_metrics(tmp_path / 'metrics.json') == [{'iter': 1, 'lr': 0.1}, {'iter': 2, 'lr': 0.2},
                                                       {'iter': 3, 'lr': 0.25}]
    assert (tmp_path / 'metrics.json').read_text().startswith(at_checkpoint)


def test_metrics_json_writes_nan_and_infinities_as_strings(tmp_path):
    storage, writer = EventStorage(), JSONWriter(tmp_path / 'metrics.json')
    storage.put_scalars(a=float('nan'), b=float('-inf'), smoothing_hint=False, cur_iter=1)
    writer.write(storage)
    storage.put_scalar('c', 1.0, smoothing_hint=False, cur_iter=1)  # rewrites the line holding the NaN
    writer.write(storage); writer.close()
    text = (tmp_path / 'metrics.json').read_text()
    assert text == '{"iter": 1, "a": "nan", "b": "-inf", "c": 1.0}\n'
    assert [float(v) for v in read_metrics(tmp_path / 'metrics.json')[0].values()][2:] == [float('-inf'), 1.0]


def test_a_writer_appends_to_a_file_it_did_not_write(tmp_path):
    (tmp_path / 'metrics.json').write_text('{"iter": 1, "note": "an older run"}\n')
    storage, writer = EventStorage(), JSONWriter(tmp_path / 'metrics.json')
    storage.put_scalar('lr', 0.1, smoothing_hint=False, cur_iter=1)
    writer.write(storage); writer.close()
    assert read_metrics(tmp_path / 'metrics.json') == [{'iter': 1, 'note': 'an older run'}, {'iter': 1, 'lr': 0.1}]


# --- trackers: arguments checked when they are made ---

@pytest.mark.parametrize('make,words', [
    (lambda: EarlyStopping(patience='3'), ["EarlyStopping(patience='3')", 'whole number >= 1', 'patience=3']),
    (lambda: EarlyStopping(patience=0), ['EarlyStopping(patience=0)', 'whole number >= 1']),
    (lambda: EarlyStopping(patience=1.5), ['EarlyStopping(patience=1.5)', 'whole number >= 1']),
    (lambda: EarlyStopping(patience=True), ['EarlyStopping(patience=True)', 'whole number >= 1']),
    (lambda: EarlyStopping(min_delta=-0.1), ['EarlyStopping(min_delta=-0.1)', 'number >= 0']),
    (lambda: EarlyStopping(min_delta='0.1'), ["EarlyStopping(min_delta='0.1')", 'number >= 0', 'min_delta=0.1']),
    (lambda: EarlyStopping(min_delta=float('nan')), ['EarlyStopping(min_delta=nan)', 'number >= 0']),
    (lambda: ReduceLROnPlateau(patience='2'), ["ReduceLROnPlateau(patience='2')", 'whole number >= 1']),
    (lambda: ReduceLROnPlateau(factor='10'), ["ReduceLROnPlateau(factor='10')", 'number > 1', 'factor=10']),
    (lambda: ReduceLROnPlateau(factor=1), ['ReduceLROnPlateau(factor=1)', 'number > 1']),
    (lambda: ReduceLROnPlateau(factor=0.1), ['ReduceLROnPlateau(factor=0.1)', 'divides', '10']),
    (lambda: ReduceLROnPlateau(min_lr=-1e-6), ['ReduceLROnPlateau(min_lr=-1e-06)', 'number >= 0']),
    (lambda: ReduceLROnPlateau(min_lr=None), ['ReduceLROnPlateau(min_lr=None)', 'number >= 0']),
    (lambda: ReduceLROnPlateau(min_delta=-1), ['ReduceLROnPlateau(min_delta=-1)', 'number >= 0']),
])
def test_trackers_check_their_arguments_when_made(make, words):
    with pytest.raises((TypeError, ValueError)) as info: make()
    for w in words: assert w in str(info.value)


def test_trackers_accept_good_arguments():
    es = EarlyStopping(patience=np.int64(3), min_delta=np.float32(0.5))
    assert (es.patience, es.min_delta) == (3, 0.5)
    rl = ReduceLROnPlateau(patience=2, factor=2, min_lr=1e-7, min_delta=0)
    assert (rl.patience, rl.factor, rl.min_lr, rl.min_delta) == (2, 2.0, 1e-7, 0.0)
