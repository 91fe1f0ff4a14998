"""The order of events over a whole fit, recorded by a probe callback."""
from trainer_nb.testing import EventRecorder, synth_learner

TRAIN_BATCH = ['before_batch', 'after_pred', 'after_loss', 'before_backward', 'after_backward', 'before_step',
               'after_step', 'after_batch']
VALID_BATCH = ['before_batch', 'after_pred', 'after_loss', 'after_batch']


def epoch(n_train, n_valid):
    return (['before_epoch', 'before_train'] + TRAIN_BATCH * n_train + ['after_train', 'before_validate']
            + VALID_BATCH * n_valid + ['after_validate', 'after_epoch'])


def test_whole_fit_event_order():
    rec = EventRecorder()
    learn = synth_learner(n_train=48, n_valid=32, bs=16, cbs=rec)
    learn.fit(2)
    assert rec.events == ['before_fit'] + epoch(3, 2) * 2 + ['after_fit']
    # where the loop was at each event: epochs and batch indices, train/valid mode
    train_batches = [(e, i) for ev, e, i, t in rec.log if ev == 'before_batch' and t]
    assert train_batches == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    valid_batches = [(e, i) for ev, e, i, t in rec.log if ev == 'before_batch' and not t]
    assert valid_batches == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(not t for ev, _, _, t in rec.log if ev in ('before_validate', 'after_validate'))
    assert learn.stop_reason == 'completed'


def test_default_callbacks_in_order(tmp_path):
    learn = synth_learner(default_cbs=True, path=tmp_path)
    assert [type(c).__name__ for c in learn.cbs] == ['Recorder', 'Throughput', 'ControlPanelCallback', 'ProgressCallback',
                                                    'LivePlotCallback', 'WriterCallback', 'SaveOnStop', 'RunRecord',
                                                    'Preemption']
    lines = []
    learn.show_loop(print_fn=lines.append)
    text = lines[0]
    assert 'after_validate' in text and 'Recorder, ControlPanelCallback, ProgressCallback, LivePlotCallback, WriterCallback' in text  # (Throughput: no after_validate)


def test_order_ties_keep_insertion_order():
    from trainer_nb.callback.core import LambdaCallback
    seen = []
    cbs = [LambdaCallback(order=o, before_fit=lambda l, tag=tag: seen.append(tag))
           for o, tag in ((5, 'a'), (0, 'b'), (5, 'c'), (-1, 'd'))]
    synth_learner(cbs=cbs).fit(1)
    assert seen == ['d', 'b', 'a', 'c']


def test_run_train_run_valid_gating():
    from trainer_nb.callback.core import Callback

    class TrainOnly(Callback):
        run_valid = False
        def __init__(self): self.modes = []
        def before_batch(self): self.modes.append(self.learn.training)
        def before_validate(self): self.modes.append('validate')

    cb = TrainOnly()
    synth_learner(n_train=32, n_valid=32, cbs=cb).fit(1)
    assert cb.modes == [True, True]
