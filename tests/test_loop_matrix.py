"""The cancel / interrupt / error matrix: for each event, what a callback raising there leads to.

This is the table in the `learner` chapter, as tests. The fit: 2 epochs, 3 training and 2 validation batches
each. A `Raiser` callback raises at the first occurrence of an event (in training or validation), and an
`EventRecorder` (which runs before it) records everything.
"""
import pytest

from trainer_nb.callback.core import (EVENTS, CANCEL_EXCEPTIONS, Callback, CancelBatchException,
                                      CancelBackwardException, CancelEpochException, CancelFitException,
                                      CancelStepException, CancelTrainException, CancelValidException)
from trainer_nb.testing import EventRecorder, synth_learner

N_TRAIN, N_VALID = 3, 2


FIT_LEVEL = ('before_fit', 'after_fit', 'after_cancel_fit', 'before_epoch', 'after_epoch', 'after_cancel_epoch')


class Raiser(Callback):
    "Raise `exc` at the first `event` in training (or validation); with `then`, only after raising `then` first."
    order = -50

    def __init__(self, event, exc, training=True, then=None):
        self.event, self.exc, self.training, self.then = event, exc, training, then
        self.fired = self.triggered = False

    def handlers(self):
        events = {self.event: self._maybe_raise}
        if self.then: events[self.then[0]] = self._trigger
        return events

    def _in_phase(self, event):
        return event in FIT_LEVEL or self.learn.training == self.training

    def _trigger(self):  # cause the cancel whose after_cancel_* event we want to raise in
        if not self.triggered and self._in_phase(self.then[0]):
            self.triggered = True
            raise self.then[1]()

    def _maybe_raise(self):
        if self.fired or not self._in_phase(self.event) or (self.then and not self.triggered): return
        self.fired = True
        raise self.exc() if isinstance(self.exc, type) else self.exc


def run(event, exc, training=True, then=None):
    rec, raiser = EventRecorder(), Raiser(event, exc, training, then)
    learn = synth_learner(n_train=16 * N_TRAIN, n_valid=16 * N_VALID, bs=16, cbs=[rec, raiser])
    error = None
    try: learn.fit(2)
    except BaseException as e: error = e
    assert raiser.fired, f"{event} never fired"
    # index of the raising event in the record
    at = next(i for i, (ev, e, it, t) in enumerate(rec.log) if ev == event and (t == training or event in FIT_LEVEL)
              and (not then or any(x[0] == then[0] for x in rec.log[:i])))
    return learn, rec.events, at, error


# event (and train or valid) -> (cancel to raise, the phase it cancels, the first event after after_<phase>)
CANCEL_ROWS = [
    ('before_fit', True, CancelFitException, 'fit', None),
    ('before_epoch', True, CancelEpochException, 'epoch', 'before_epoch'),
    ('before_train', True, CancelTrainException, 'train', 'before_validate'),
    ('before_batch', True, CancelBatchException, 'batch', 'before_batch'),
    ('after_pred', True, CancelBatchException, 'batch', 'before_batch'),
    ('after_loss', True, CancelBatchException, 'batch', 'before_batch'),
    ('before_backward', True, CancelBackwardException, 'backward', 'before_step'),
    ('after_backward', True, CancelBatchException, 'batch', 'before_batch'),
    ('before_step', True, CancelStepException, 'step', 'after_batch'),
    ('after_step', True, CancelBatchException, 'batch', 'before_batch'),
    ('after_batch', True, CancelTrainException, 'train', 'before_validate'),
    ('after_train', True, CancelEpochException, 'epoch', 'before_epoch'),
    ('before_validate', False, CancelValidException, 'validate', 'after_epoch'),
    ('before_batch', False, CancelBatchException, 'batch', 'before_batch'),
    ('after_pred', False, CancelBatchException, 'batch', 'before_batch'),
    ('after_loss', False, CancelBatchException, 'batch', 'before_batch'),
    ('after_batch', False, CancelValidException, 'validate', 'after_epoch'),
    ('after_validate', False, CancelEpochException, 'epoch', 'before_epoch'),
    ('after_epoch', True, CancelFitException, 'fit', None),
]


@pytest.mark.parametrize('event,training,exc,phase,next_event', CANCEL_ROWS,
                         ids=[f"{r[0]}-{'train' if r[1] else 'valid'}" for r in CANCEL_ROWS])
def test_cancel(event, training, exc, phase, next_event):
    learn, events, at, error = run(event, exc, training)
    assert error is None
    assert events[at + 1:at + 3] == [f'after_cancel_{phase}', f'after_{phase}']
    if next_event is None:
        assert events[at + 1:] == ['after_cancel_fit', 'after_fit']
        assert learn.stop_reason == 'cancelled'
    else:
        assert events[at + 3] == next_event
        assert events[-1] == 'after_fit' and learn.stop_reason == 'completed'
    if exc is CancelStepException:  # the skipped step is not counted, and no optimizer step happened
        assert learn.step == 2 * N_TRAIN - 1


def test_cancel_after_its_phase_is_over_is_an_error():
    learn, events, at, error = run('after_batch', CancelBatchException)
    assert isinstance(error, RuntimeError) and "raised in 'after_batch'" in str(error)
    assert events[at + 1:] == ['after_fit'] and learn.stop_reason == 'error'


def test_cancel_in_after_fit_is_an_error():
    learn, events, at, error = run('after_fit', CancelFitException)
    assert isinstance(error, CancelFitException) and learn.stop_reason == 'error'


# every event, and the after_cancel_* events reached by first raising their cancel
VALID_ONLY = ('before_validate', 'after_validate')
ALL_ROWS = ([(e, e not in VALID_ONLY, None) for e in EVENTS if not e.startswith('after_cancel')]
            + [(e, False, None) for e in ('before_batch', 'after_pred', 'after_loss', 'after_batch')]
            + [(f'after_cancel_{p}', p != 'validate',
                (f"before_{p}", CANCEL_EXCEPTIONS[p]))
               for p in CANCEL_EXCEPTIONS])


@pytest.mark.parametrize('event,training,then', ALL_ROWS,
                         ids=[f"{r[0]}-{'train' if r[1] else 'valid'}" for r in ALL_ROWS])
def test_keyboard_interrupt(event, training, then):
    learn, events, at, error = run(event, KeyboardInterrupt, training, then)
    assert isinstance(error, KeyboardInterrupt)
    assert learn.stop_reason == 'interrupted'
    expected_rest = [] if event == 'after_fit' else ['after_fit']
    assert events[at + 1:] == expected_rest


@pytest.mark.parametrize('event,training,then', ALL_ROWS,
                         ids=[f"{r[0]}-{'train' if r[1] else 'valid'}" for r in ALL_ROWS])
def test_error(event, training, then):
    learn, events, at, error = run(event, ZeroDivisionError('boom'), training, then)
    assert type(error) is ZeroDivisionError
    assert f"(raised in callback Raiser, name 'raiser', during event '{event}')" in error.__notes__
    assert learn.stop_reason == 'error'
    assert events[at + 1:] == ([] if event == 'after_fit' else ['after_fit'])


def test_after_fit_runs_for_every_callback_even_when_one_fails():
    closed = []

    class Fails(Callback):
        order = 0
        def after_fit(self): raise OSError('disk full')

    class Closes(Callback):
        order = 10
        def after_fit(self): closed.append(self.learn.stop_reason)

    learn = synth_learner(cbs=[Fails(), Closes()])
    with pytest.raises(OSError):
        learn.fit(1)
    assert closed == ['completed'] and learn.stop_reason == 'error'


def test_error_in_loop_keeps_after_fit_and_notes_failures_of_after_fit():
    class BadModelCb(Callback):
        def after_pred(self): raise ValueError('bad prediction')
        def after_fit(self): raise OSError('could not close')

    learn = synth_learner(cbs=BadModelCb())
    with pytest.raises(ValueError) as info:
        learn.fit(1)
    notes = info.value.__notes__
    assert any('OSError' in n and 'after_fit' in n for n in notes)


def test_stop_request_ends_at_a_batch_boundary():
    class Stopper(Callback):
        def after_step(self):
            if self.learn.step == 5: self.learn.request_stop()

    rec = EventRecorder()
    learn = synth_learner(n_train=64, bs=16, cbs=[rec, Stopper()])
    learn.fit(3)
    assert learn.stop_reason == 'interrupted'
    assert learn.step == 5 and learn.fit_state.epoch_iter == 1 and learn.fit_state.epoch == 1
    # the batch finished completely before stopping
    assert rec.events[-4:] == ['after_step', 'after_batch', 'after_cancel_fit', 'after_fit']


def test_fit_scoped_callbacks_are_removed_after_errors():
    class Boom(Callback):
        def before_fit(self): raise RuntimeError('no')

    learn = synth_learner()
    with pytest.raises(RuntimeError):
        learn.fit(1, cbs=Boom())
    assert learn.cbs == [] and not hasattr(learn, 'boom')
