"""A fit's fixed costs and its costs a step, apart: fits of 20 and 1020 steps of the tiny MLP of `overhead.py`, timed
interleaved; the difference of their medians over 1000 is the cost a step, what is left at 20 steps the fixed cost
(the learner made, `before_fit`, `after_fit` with its final figure and files). Variants: the hand loop, the default
learner, and `progress=False` (`quiet`), of this tree and, with `--commit C`, of commit C (as `ab_commit.py` extracts it).
With `--callbacks`, each default callback's time (`learn.time_callbacks()`) in a fit of 1 step and of 2001 steps, as a
fixed cost and a cost a step.

Run: python bench/fit_costs.py [--commit c736b05] [--rounds 7] [--callbacks]
"""
import argparse
import contextlib
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab_commit  # noqa: E402
import overhead  # noqa: E402
from trainer_nb.learner import Learner  # noqa: E402


def fit_with(cls, **kw):
    "A variant for `overhead.timed`: a new learner of `cls` (in a new folder) fits `steps` steps."
    def fit(dl, steps, out):
        learn = cls(overhead.make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=tempfile.mkdtemp(dir=out),
                    device='cpu', **kw)
        with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f): learn.fit(n_steps=steps)
        return learn
    return fit


def split(learners: dict, rounds: int):
    "Print each variant's cost a step and fixed cost."
    dl = overhead.make_data()
    for name, cls in learners.items():
        overhead.VARIANTS[name] = fit_with(cls)
        overhead.VARIANTS[f'{name}_quiet'] = fit_with(cls, progress=False)
    names = ['hand'] + [n for name in learners for n in (name, f'{name}_quiet')]
    short, long = {n: [] for n in names}, {n: [] for n in names}
    with tempfile.TemporaryDirectory() as out:
        for n in names: overhead.timed(n, dl, 100, out)  # warm-up
        for r in range(rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                short[n].append(overhead.timed(n, dl, 20, out))
                long[n].append(overhead.timed(n, dl, 1020, out))
    print(f"torch {torch.__version__}, {rounds} rounds of fits of 20 and 1020 steps, 1 thread")
    print("| variant | us a step | fixed ms a fit |\n|---|---|---|")
    for n in names:
        a, b = statistics.median(short[n]), statistics.median(long[n])
        per = (b - a) / 1000
        print(f"| {n} | {per * 1e6:.1f} | {(a - 20 * per) * 1000:.1f} |")


def callback_times(learners: dict):
    "Print each callback's fixed cost (ms a fit) and cost a step (us), from fits of 1 and 2001 steps."
    dl = overhead.make_data()
    with tempfile.TemporaryDirectory() as out:
        for name, cls in learners.items():
            times = {}
            for steps in (1, 1, 2001):  # (the first fit pays the imports)
                learn = cls(overhead.make_model(), dl, nn.functional.cross_entropy, lr=1e-3,
                            path=tempfile.mkdtemp(dir=out), device='cpu')
                learn.time_callbacks()
                with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f): learn.fit(n_steps=steps)
                times[steps] = dict(learn.callback_times)
            print(f"\n{name}: | callback | fixed ms a fit | us a step |\n|---|---|---|")
            for cb, t in times[2001].items():
                print(f"| {cb} | {times[1].get(cb, 0) * 1000:.2f} | {(t - times[1].get(cb, 0)) / 2000 * 1e6:.1f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--commit', help="also this commit's learner")
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--callbacks', action='store_true', help="each callback's time instead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    learners = {'main': Learner}
    if args.commit: learners[args.commit] = ab_commit.learner_at(args.commit, Path(tempfile.mkdtemp()))
    if args.callbacks: callback_times(learners)
    else: split(learners, args.rounds)


if __name__ == '__main__':
    main()
