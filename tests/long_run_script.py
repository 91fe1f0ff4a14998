"""A training script for tests/test_long_runs.py: `python long_run_script.py RUN_FOLDER [options]`, alone or under
`torchrun --nproc_per_node=2` (then with `DistributedTrainer`). It can send itself a signal at a chosen moment
(`--signal-at`), sleeps in each batch when asked (time for a signal from outside), and ends with `exit_code`."""
import argparse
import os
import signal
import sys
import time

import torch
from torch import nn

from trainer_nb.callback.checkpoint import CheckpointCallback
from trainer_nb.callback.core import Callback
from trainer_nb.callback.long_runs import exit_code
from trainer_nb.demo import digits_dls, digits_model
from trainer_nb.learner import Learner

parser = argparse.ArgumentParser()
parser.add_argument('path')
parser.add_argument('--epochs', type=int, default=2)
parser.add_argument('--eval-every', type=int, default=None)
parser.add_argument('--signal-at', choices=['first_step', 'train', 'valid', 'save'], default=None)
parser.add_argument('--at-step', type=int, default=5, help='the step at (or after) which --signal-at signals')
parser.add_argument('--sleep', type=float, default=0., help='seconds to sleep in each training batch')
parser.add_argument('--time-limit', type=float, default=None)
parser.add_argument('--resume', default=None)
parser.add_argument('--workers', type=int, default=0, help='worker processes of the training loader')
args = parser.parse_args()


def signal_self(): os.kill(os.getpid(), signal.SIGTERM)


def say(line: str):
    "One line in one write: two processes share the output pipe, and `print` may write the text and its newline apart."
    sys.stdout.write(line + '\n')
    sys.stdout.flush()


class SignalAt(Callback):
    "Send this process SIGTERM once, at a moment of the fit; print this process's id first (for signals from outside)."
    def __init__(self): self.sent = False
    def before_fit(self):
        say(f"PID {self.learn.rank} {os.getpid()}")
    def before_batch(self):
        if self.learn.training and args.signal_at == 'first_step' and self.learn.step == 0: self._send()
    def after_pred(self):
        learn = self.learn
        if learn.training and args.signal_at == 'train' and learn.step == args.at_step: self._send()
        if not learn.training and args.signal_at == 'valid' and learn.step >= args.at_step and learn.iter == 1: self._send()
    def after_batch(self):
        if self.learn.training and args.sleep:
            time.sleep(args.sleep)
            say(f"STEP {self.learn.rank} {self.learn.step}")
    def _send(self):
        if not self.sent and (os.environ.get('SIGNAL_RANK') is None or os.environ['SIGNAL_RANK'] == str(self.learn.rank)):
            self.sent = True
            signal_self()


class SignalInSave:
    "Tracked by the learner: its state is taken in the middle of each save, where it signals (once, from --at-step)."
    def __init__(self, learn): self.learn, self.sent = learn, False
    def state_dict(self):
        if args.signal_at == 'save' and not self.sent and self.learn.step >= args.at_step and self.learn.in_fit:
            self.sent = True
            signal_self()
        return {}
    def load_state_dict(self, state): pass


cbs = [SignalAt(), CheckpointCallback(every_steps=4)]
if os.environ.get('WORLD_SIZE'):
    from trainer_nb.distributed import DistributedTrainer
    cbs.append(DistributedTrainer())
torch.manual_seed(0)
dls = digits_dls(bs=64 // int(os.environ.get('WORLD_SIZE', 1)))
if args.workers:
    train = dls.train
    dls.train = torch.utils.data.DataLoader(train.dataset, batch_size=train.batch_size, shuffle=True, num_workers=args.workers)
learn = Learner(digits_model(32), dls, nn.functional.cross_entropy,
                lr=1e-2, path=args.path, device='cpu', progress=False, cbs=cbs)
learn.track(signal_in_save=SignalInSave(learn))
learn.fit(args.epochs, eval_every=args.eval_every, time_limit=args.time_limit, resume=args.resume)
say(f"END {learn.rank} {learn.step} {learn.stop_reason}")
if learn.rank == 0 and learn.stop_reason == 'completed':
    torch.save({k: v.clone() for k, v in learn.raw_model.state_dict().items()}, os.path.join(args.path, 'weights.pt'))
sys.exit(exit_code(learn))
