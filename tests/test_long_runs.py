"""Long runs (chapter `callback.long_runs`, issue 43): a SIGTERM at any moment of a script's fit is a clean stop that
the same command continues bit-identically, also under torchrun (a signal to the launcher, or to one worker only);
a time limit; `fit(..., resume='auto')`."""
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from trainer_nb.callback.checkpoint import SaveOnStop
from trainer_nb.callback.core import LambdaCallback
from trainer_nb.callback.long_runs import EXIT_REQUEUE
from trainer_nb.checkpoint import load_checkpoint
from trainer_nb.demo import digits_learner
from trainer_nb.testing import weights

SCRIPT = Path(__file__).parent / 'long_run_script.py'
ENV = dict(os.environ, OMP_NUM_THREADS='1')


def start(path, *options, torchrun=False, env=None):
    "The script, started (not waited for): its output in `proc.stdout`, one line at a time."
    launcher = [sys.executable, '-m', 'torch.distributed.run', '--standalone', '--nproc_per_node=2'] if torchrun else [sys.executable]
    return subprocess.Popen([*launcher, str(SCRIPT), str(path), *options], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**ENV, **(env or {})}, start_new_session=True)


def finish(proc, timeout=300) -> str:
    out, _ = proc.communicate(timeout=timeout)
    return out


def ends(out: str) -> dict:
    "{rank: (step, stop_reason)} from the script's END lines."
    return {int(rank): (int(step), reason) for rank, step, reason in re.findall(r'END (\d+) (\d+) (\w+)', out)}


def same_weights(a: Path, b: Path) -> bool:
    wa, wb = torch.load(a / 'weights.pt', weights_only=True), torch.load(b / 'weights.pt', weights_only=True)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_sigterm_at_any_moment_of_a_script_is_a_stop_that_the_same_command_continues(tmp_path):
    rng = random.Random(43)  # the moments: in the first batch, in a training batch, in a validation, in a save
    moments = {'first_step': 0, 'train': rng.randrange(1, 40), 'valid': rng.randrange(1, 20), 'save': 4 * rng.randrange(1, 10)}
    options = ['--eval-every', '10']
    reference = start(tmp_path / 'never_stopped', *options)
    stopped = {at: start(tmp_path / at, *options, '--signal-at', at, '--at-step', str(step))
               for at, step in moments.items()}
    assert reference.wait(300) == 0, finish(reference)
    for at, proc in stopped.items():
        out = finish(proc)
        assert proc.returncode == EXIT_REQUEUE, (at, out[-3000:])
        step, reason = ends(out)[0]
        assert reason == 'preempted', (at, out)
        state = load_checkpoint(tmp_path / at / 'checkpoints' / 'last.pt')  # (weights_only: loadable as checkpoints are)
        assert state['fit_state']['stop_reason'] == 'preempted' and state['fit_state']['resumable']
        assert state['fit_state']['step'] == step
        print(f"{at} (from step {moments[at]}): stopped at step {step}")
    resumed = {at: start(tmp_path / at, *options, '--resume', 'auto') for at in moments}
    for at, proc in resumed.items():
        out = finish(proc)
        assert proc.returncode == 0 and ends(out)[0] == (46, 'completed'), (at, out[-3000:])
        assert 'resuming from checkpoints/last.pt' in out
        assert same_weights(tmp_path / at, tmp_path / 'never_stopped'), at


def test_a_signal_to_the_whole_process_group_with_loader_workers_is_the_same_clean_stop(tmp_path):
    # SLURM, `kill -TERM -PGID` and a terminal's Ctrl+C signal every process of the group, the loader's workers too: they
    # ignore it (else a killed worker fails the fit before the stop saves `last`), and print nothing (a forked worker has
    # the fit's handler)
    reference = start(tmp_path / 'never_stopped', '--workers', '2')
    proc = start(tmp_path / 'group', '--workers', '2', '--sleep', '0.05')
    for line in proc.stdout:
        if line.startswith('STEP 0 3'): break
    os.killpg(proc.pid, signal.SIGTERM)  # (`start` gave the script a session, and so a process group, of its own)
    out = finish(proc)
    assert proc.returncode == EXIT_REQUEUE, out[-3000:]
    assert out.count('SIGTERM: stopping at the next batch boundary') == 1 and 'killed by signal' not in out, out[-3000:]
    assert load_checkpoint(tmp_path / 'group' / 'checkpoints' / 'last.pt')['fit_state']['stop_reason'] == 'preempted'
    resumed = start(tmp_path / 'group', '--workers', '2', '--resume', 'auto')
    out = finish(resumed)
    assert resumed.returncode == 0 and ends(out)[0] == (46, 'completed'), out[-3000:]
    assert reference.wait(300) == 0, finish(reference)
    assert same_weights(tmp_path / 'group', tmp_path / 'never_stopped')


@pytest.mark.skipif(not torch.distributed.is_available(), reason='torch.distributed is not available')
def test_torchrun_stops_every_process_at_the_same_step_and_continues_bit_identically(tmp_path):
    options = ['--epochs', '1', '--sleep', '0.1']
    reference = start(tmp_path / 'never_stopped', *options, torchrun=True)
    one_worker = start(tmp_path / 'one_worker', *options, '--signal-at', 'train', '--at-step', '6', torchrun=True,
                       env={'SIGNAL_RANK': '1'})
    launcher = start(tmp_path / 'launcher', *options, torchrun=True)
    lines = []
    for line in launcher.stdout:  # the launcher gets SIGTERM once both workers train (torchrun forwards it to them)
        lines.append(line)
        if re.search(r'STEP 1 ([3-9]|\d\d)\b', line): break  # (searched, not matched at the start: lines can interleave)
    else: pytest.fail('the workers ended before the launcher could be signalled:\n' + ''.join(lines)[-3000:])
    os.kill(launcher.pid, signal.SIGTERM)
    out = ''.join(lines) + finish(launcher)
    stops = ends(out)
    assert set(stops) == {0, 1} and stops[0] == stops[1] and stops[0][1] == 'preempted', out[-3000:]
    out = finish(one_worker)  # SIGTERM to process 1 only: process 0 stops at the same step
    stops = ends(out)
    assert set(stops) == {0, 1} and stops[0] == stops[1] == (7, 'preempted'), out[-3000:]
    codes = [int(line.split()[2]) for line in out.splitlines() if line.strip().startswith('exitcode')]
    # torchrun names each process's exit status. The first to exit ends with EXIT_REQUEUE; torchrun then sends SIGTERM to
    # the other, which has ended its fit (its END line is above) and may be killed by it while it exits.
    assert EXIT_REQUEUE in codes and set(codes) <= {EXIT_REQUEUE, -signal.SIGTERM}, out[-3000:]
    assert reference.wait(300) == 0, finish(reference)
    again = {name: start(tmp_path / name, *options, '--resume', 'auto', torchrun=True) for name in ('one_worker', 'launcher')}
    for name, proc in again.items():
        out = finish(proc)
        assert proc.returncode == 0 and ends(out) == {0: (23, 'completed'), 1: (23, 'completed')}, (name, out[-3000:])
        assert same_weights(tmp_path / name, tmp_path / 'never_stopped'), name


class StepTimes(LambdaCallback):
    "Sleeps in each training batch (a slow step), and keeps the longest step seen."
    def __init__(self, sleep):
        self.longest, self._last = 0., None
        def after_batch(learn):
            if not learn.training: return
            time.sleep(sleep)
            now = time.perf_counter()
            if self._last is not None: self.longest = max(self.longest, now - self._last)
            self._last = now
        super().__init__(after_batch=after_batch)


def test_a_time_limit_stops_before_it_and_resumes_exactly(tmp_path):
    learn = digits_learner(path=tmp_path / 'limited', progress=False, device='cpu')
    steps = StepTimes(0.03)
    start = time.time()
    learn.fit(2, eval_every=5, cbs=steps, time_limit=1.5)
    elapsed = time.time() - start
    assert learn.stop_reason == 'time_limit' and learn.fit_state.resumable
    assert 0 < learn.step < 46
    assert elapsed <= 1.5 + steps.longest, (elapsed, steps.longest)  # never past the limit by more than a step
    print(f"stopped at step {learn.step} after {elapsed:.2f} s (limit 1.5 s, longest step {steps.longest:.3f} s)")
    assert (tmp_path / 'limited' / 'checkpoints' / 'last.pt').is_file()
    again = digits_learner(path=tmp_path / 'limited', progress=False, device='cpu')  # a new process's learner
    again.fit(2, eval_every=5, cbs=StepTimes(0.), resume='auto')
    once = digits_learner(path=tmp_path / 'once', progress=False, device='cpu')
    once.fit(2, eval_every=5)
    assert again.stop_reason == 'completed' and again.step == once.step == 46
    assert weights(again.model) == weights(once.model)


def test_a_resume_warning_names_the_callers_line(tmp_path):
    "The warning about callbacks to pass again names the line that resumed (here), by either path through the library."
    def stop_at_7(learn):
        if learn.step == 7: learn.request_stop('preempted')
    for folder in ('auto', 'load'):
        digits_learner(path=tmp_path / folder, progress=False, device='cpu').fit(
            1, cbs=LambdaCallback(after_step=stop_at_7), resume='auto')
    again = digits_learner(path=tmp_path / 'auto', progress=False, device='cpu')
    with pytest.warns(UserWarning, match=r"pass them again: .*the same fit\(..., cbs=\[...\]\)") as by_auto:
        again.fit(1, resume='auto')  # (its callback not given again)
    loaded = digits_learner(path=tmp_path / 'load', progress=False, device='cpu').load('last')
    with pytest.warns(UserWarning, match='pass them again') as by_resume:
        loaded.resume()
    assert [w.filename for w in (*by_auto, *by_resume)] == [__file__, __file__]
    assert again.step == loaded.step == 23

def test_resume_auto_starts_continues_or_refuses(tmp_path):
    def stop_at_7(learn):
        if learn.step == 7: learn.request_stop('preempted')
    first = digits_learner(path=tmp_path, progress=False, device='cpu')
    first.fit(1, cbs=LambdaCallback(after_step=stop_at_7), resume='auto')  # no `last`: a new fit
    assert (first.fit_kind, first.stop_reason, first.step) == ('fit', 'preempted', 7)
    second = digits_learner(path=tmp_path, progress=False, device='cpu')
    second.fit(1, cbs=LambdaCallback(after_step=lambda learn: None), resume='auto')  # a matching `last`: continued
    assert (second.fit_kind, second.stop_reason, second.step) == ('resume', 'completed', 23)
    third = digits_learner(path=tmp_path, progress=False, device='cpu')
    third.fit(1, resume='auto')  # the `last` of a completed fit (saved at its end): nothing left to train
    assert third.fit_kind is None and third.step == 23 and third.stop_reason == 'completed'
    assert weights(third.model) == weights(second.model)
    other = digits_learner(path=tmp_path, progress=False, device='cpu')
    other.model = nn.Sequential(nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))  # another model, same folder
    other.opt = other.create_opt()
    with pytest.raises(RuntimeError, match="refuses .*last.pt: its model or optimizer differs"):
        other.fit(1, resume='auto')
    shorter = digits_learner(path=tmp_path, progress=False, device='cpu', bs=128)  # other data: fewer batches
    with pytest.raises(RuntimeError, match="12 batches an epoch|23 batches an epoch"):
        shorter.fit(1, resume='auto')


class ScaleBatch(LambdaCallback):
    """Scales the inputs of the training batches of `steps` (the first time each comes) by `scale`: the loss blows up
    (in process `rank` only, if given: known once the fit has started)."""
    def __init__(self, steps, scale=1e4, rank=None):
        done = set()
        def before_batch(learn):
            if learn.training and learn.step in steps and learn.step not in done and rank in (None, learn.rank):
                done.add(learn.step)
                learn.xb = (learn.xb[0] * scale,)
        super().__init__(before_batch=before_batch)


def test_a_loss_spike_rolls_back_skips_its_batches_and_ends_with_the_same_weights_twice(tmp_path):
    from trainer_nb.callback.long_runs import LossSpikes
    import json

    def run(name):
        learn = digits_learner(path=tmp_path / name, progress=False, device='cpu',
                               cbs=[LossSpikes(window=10, keep_every=5)])
        learn.fit(2, cbs=ScaleBatch({17}, scale=float('nan')) if name == 'nan' else ScaleBatch({17}))
        return learn

    one, two = run('one'), run('two')
    for learn in (one, two):
        assert learn.stop_reason == 'completed'
        [rollback] = learn.loss_spikes.rollbacks
        assert (rollback['step'], rollback['to_step']) == (17, 15)
        assert rollback['skipped'] == [{'epoch': 0, 'first': 15, 'last': 17}]  # the 3 batches since step 15
        assert learn.step == 46 - 3
    assert weights(one.model) == weights(two.model)
    entry = json.loads((tmp_path / 'one' / 'run.json').read_text())['entries'][-1]
    assert entry['rollbacks'][0]['skipped'] == [{'epoch': 0, 'first': 15, 'last': 17}]
    assert [v for v, _ in one.storage.history('spikes/rollback').values()] == [2]
    # metrics.json keeps the undone steps 16 and 17 as logged, then the steps made again; as a curve, the later values
    from trainer_nb.writers import metrics_series, read_metrics
    logged = one.storage.history('train/loss').values()
    assert [it for _, it in logged].count(16) == 2  # (the storage: both)
    steps, values = metrics_series(read_metrics(tmp_path / 'one' / 'metrics.json'))['train/loss']
    assert steps == list(range(1, 44))
    assert values == pytest.approx(list({it: v for v, it in logged}.values()), rel=1e-6)  # (the last value of each step)
    nan = run('nan')  # a NaN loss: rolled back the same way
    assert nan.stop_reason == 'completed' and nan.loss_spikes.rollbacks[0]['loss'] == 'nan'
    assert weights(nan.model) == weights(one.model)


def test_a_spike_at_every_step_stops_after_the_rollbacks_allowed(tmp_path):
    from trainer_nb.callback.long_runs import LossSpikes
    learn = digits_learner(path=tmp_path, progress=False, device='cpu',
                           cbs=[LossSpikes(window=5, keep_every=5, max_rollbacks=3, within=50)])
    spikes = LambdaCallback(before_batch=lambda l: setattr(l, 'xb', (l.xb[0] * 1e4,)) if l.training and l.step >= 8 else None)
    learn.fit(2, cbs=spikes)
    assert learn.stop_reason == 'loss_spike' and len(learn.loss_spikes.rollbacks) == 3
    assert learn.step == 8  # the weights before the spike that stopped it: good ones
    assert [r['skipped'][0]['first'] for r in learn.loss_spikes.rollbacks] == [5, 9, 13]  # (each time, from the kept step 5)
    assert all(torch.isfinite(p).all() for p in learn.model.parameters())


def test_a_loss_spike_in_one_process_rolls_every_process_back_together(tmp_path):
    """Two processes (DistributedTrainer): a spike that one of them sees rolls both back to the same kept step and
    skips the same batches, so their weights stay the same; and whichever process saw it, the fit ends the same."""
    from trainer_nb.callback.long_runs import LossSpikes
    from trainer_nb.distributed import DistributedTrainer, launch

    def run(spiking_rank):
        learn = digits_learner(path=tmp_path / f'spike_on_{spiking_rank}', progress=False, device='cpu',
                               cbs=[DistributedTrainer(), LossSpikes(window=5, keep_every=5)])
        learn.fit(2, cbs=ScaleBatch({7}, rank=spiking_rank))
        mine = (learn.rank, learn.stop_reason, learn.step, learn.loss_spikes.rollbacks, weights(learn.model))
        both = [None, None]
        torch.distributed.all_gather_object(both, mine)  # (launch returns process 0's result: it holds both)
        return both

    on_1, on_0 = launch(run, 2, 1), launch(run, 2, 0)
    for results in (on_1, on_0):
        (r0, stop0, step0, rb0, w0), (r1, stop1, step1, rb1, w1) = results
        assert (r0, r1, stop0, stop1) == (0, 1, 'completed', 'completed')
        assert [(r['step'], r['to_step'], r['skipped']) for r in rb0] == [(7, 5, [{'epoch': 0, 'first': 5, 'last': 7}])]
        assert [(r['step'], r['to_step'], r['skipped']) for r in rb1] == [(r['step'], r['to_step'], r['skipped']) for r in rb0]
        assert step0 == step1 and w0 == w1  # (the process that saw no spike rolled back too)
        assert rb0[0]['loss'] == rb1[0]['loss'] > 1e3  # both say the spike's loss, not process 0's own (about 2)
    assert on_1[0][4] == on_0[0][4]  # the same end, whichever process saw the spike
