"""The learner of an earlier commit against the learner of this working tree, in one process and one run.

Ratios to the hand loop move by a percent or two between runs on a shared machine, so a figure recorded weeks
ago is a poor baseline for "no worse than before". This puts both learners in the same run: the package at
COMMIT is extracted with `git archive` into a temporary folder, renamed `trainer_nb_at_<commit>` (its absolute
imports are renamed too), and imported beside `trainer_nb`. The variants are those of `overhead.py`
(same model, data and hand loop), interleaved in a rotating order:
  - `hand`: the hand-written loop;
  - `bare_then`, `bare_now`: a Learner with no callbacks, at COMMIT and now;
  - `bare_now_noguard`: now, with `nan_guard=False` (for a COMMIT from before the NaN guard existed);
  - `default_then`, `default_now`: with the default callbacks (with --default).
Besides the medians, each variant's fastest round: on a machine shared with other work, the round least disturbed.
With --tiny, the model is one parameter (`x * a`, SGD) and the data a list of 200 batches: a step is then mostly the
loop's own Python, so the per-step difference between the two learners is measured with less noise.

Run: python bench/ab_commit.py 7dfc9bd [--rounds 9] [--steps 2000] [--default] [--tiny]
"""
import argparse
import contextlib
import importlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / 'bench'))
import overhead  # noqa: E402
from trainer_nb.learner import Learner  # noqa: E402


def learner_at(commit: str, folder: Path):
    "The `Learner` class of the package at `commit`, imported as `trainer_nb_at_<commit>` from `folder`."
    name = f'trainer_nb_at_{commit}'
    archive = subprocess.run(['git', 'archive', commit, 'trainer_nb'], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(['tar', 'x'], input=archive.stdout, cwd=folder, check=True)
    (folder / 'trainer_nb').rename(folder / name)
    for py in (folder / name).rglob('*.py'):  # relative imports need nothing; absolute ones name the package
        py.write_text(re.sub(r'\btrainer_nb\b', name, py.read_text()))
    sys.path.insert(0, str(folder))
    return importlib.import_module(f'{name}.learner').Learner


class Scale(nn.Module):
    "The tiny model: one parameter."
    def __init__(self):
        super().__init__()
        self.a = nn.Parameter(torch.zeros(1))
    def forward(self, x): return x * self.a


def tiny_data():
    x, y = torch.randn(64 * 200, 1), torch.randn(64 * 200, 1)
    return [(x[i:i + 64], y[i:i + 64]) for i in range(0, len(x), 64)]


def tiny_learner(cls, dl, out: str, default_cbs: bool = False, **kwargs):
    "A learner of class `cls` on the tiny model."
    return cls(Scale(), dl, nn.functional.mse_loss, opt_func=torch.optim.SGD, lr=1e-3, path=out, device='cpu',
               default_cbs=default_cbs, **kwargs)


def tiny_hand(dl, steps: int, out: str):
    "The hand-written loop on the tiny model."
    return overhead.hand(dl, steps, out, Scale(), torch.optim.SGD, nn.functional.mse_loss)


def fit(cls, dl, steps: int, out: str, default_cbs: bool, tiny: bool, **kwargs) -> float:
    "Seconds of `fit(n_steps=steps)` of a learner of class `cls` (construction not counted), in a run folder of its own."
    out = overhead.run_folder(out)  # (a shared folder: each fit would add its lines to another run's metrics.json)
    if tiny: learn = tiny_learner(cls, dl, out, default_cbs, **kwargs)
    else: learn = cls(overhead.make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=out, device='cpu',
                      default_cbs=default_cbs, **kwargs)
    with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f):
        t0 = time.perf_counter()
        learn.fit(n_steps=steps)
        return time.perf_counter() - t0


def hand(dl, steps: int, out: str, tiny: bool) -> float:
    t0 = time.perf_counter()
    (tiny_hand if tiny else overhead.hand)(dl, steps, out)
    return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('commit')
    parser.add_argument('--rounds', type=int, default=9)
    parser.add_argument('--steps', type=int, default=2000)
    parser.add_argument('--default', action='store_true', help="also compare the default callbacks")
    parser.add_argument('--tiny', action='store_true', help="a one-parameter model on a list of batches")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dl = tiny_data() if args.tiny else overhead.make_data()
    with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as out:
        then = learner_at(args.commit, Path(src))
        tiny = args.tiny
        variants = {'hand': lambda n: hand(dl, n, out, tiny),
                    'bare_then': lambda n: fit(then, dl, n, out, False, tiny),
                    'bare_now': lambda n: fit(Learner, dl, n, out, False, tiny),
                    'bare_now_noguard': lambda n: fit(Learner, dl, n, out, False, tiny, nan_guard=False)}
        if args.default:
            variants |= {'default_then': lambda n: fit(then, dl, n, out, True, tiny),
                         'default_now': lambda n: fit(Learner, dl, n, out, True, tiny)}
        names, times = list(variants), {n: [] for n in variants}
        for n in names: variants[n](200)  # warm-up
        for r in range(args.rounds):
            for n in names[r % len(names):] + names[:r % len(names)]: times[n].append(variants[n](args.steps))
    hand_step = statistics.median(times['hand']) / args.steps
    print(f"commit {args.commit} against the working tree; {'tiny model, ' if args.tiny else ''}"
          f"torch {torch.__version__}, {args.steps} steps, "
          f"{args.rounds} rounds, 1 thread; hand loop {hand_step * 1e6:.1f} us a step")
    print("| variant | median ratio to hand | ratios, min-max | us a step over hand | fastest round, us a step |")
    print("|---|---|---|---|---|")
    fastest = {n: min(times[n]) / args.steps * 1e6 for n in names}  # (the round least disturbed by other work)
    print(f"| hand | | | | {fastest['hand']:.1f} |")
    for n in names[1:]:
        ratios = [t / h for t, h in zip(times[n], times['hand'])]
        extra = (statistics.median(times[n]) / args.steps - hand_step) * 1e6
        print(f"| {n} | {statistics.median(ratios):.3f}x | {min(ratios):.3f}-{max(ratios):.3f} | {extra:+.1f} | "
              f"{fastest[n]:.1f} |")


if __name__ == '__main__': main()
