"""Python calls a training step, counted with cProfile: a measure of the loop's work that does not depend on load.

The MLP of `overhead.py` (32 -> 64 -> 10, batch 64, AdamW, 1 thread). Each variant runs a fit of `--steps` steps and
one of twice as many under cProfile; the difference of their call counts, divided by `--steps`, is the calls a step
(the fixed costs of a fit, its start and end, cancel). Calls are those cProfile sees: Python functions and the C
functions they call (tensor operations among them). Variants:
  - `hand`: the hand-written loop;
  - `default`: a Learner with its default callbacks (console output to a file);
  - `no_bar`: the same inside `with learn.no_bar():` (no bars, live plot or panel);
  - `bare`: a Learner with no callbacks;
and with `--commit C`, `default`, `no_bar` and `bare` of the package at commit C (extracted as in `ab_commit.py`).
With `--top N`, the N functions called most a step in the `default` variant (this tree).

Run: python bench/calls_a_step.py [--commit c736b05] [--steps 300] [--top 25]
"""
import argparse
import contextlib
import cProfile
import pstats
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab_commit  # noqa: E402
import overhead  # noqa: E402


def run_learner(cls, dl, steps: int, out: str, default_cbs: bool, no_bar: bool):
    "A function that fits a new learner (in a new folder: the fixed costs of each fit are the same) for `n` steps."
    def fit(n: int):
        learn = cls(overhead.make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=tempfile.mkdtemp(dir=out),
                    device='cpu', default_cbs=default_cbs)
        with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f):
            with learn.no_bar() if no_bar else contextlib.nullcontext(): learn.fit(n_steps=n)
    yield fit


def profiled(fn, n: int) -> pstats.Stats:
    prof = cProfile.Profile()
    prof.enable()
    fn(n)
    prof.disable()
    return pstats.Stats(prof)


def per_step(make, steps: int, top: int = 0) -> float:
    "Calls a step of the fit `make` sets up: (calls of 2*steps - calls of steps) / steps."
    gen = make()
    fn = next(gen)
    fn(steps)  # (warm-up: first-call work, imports and caches, is not a step's)
    a, b = profiled(fn, steps), profiled(fn, 2 * steps)
    gen.close()
    if top:
        ca = {k: v[1] for k, v in a.stats.items()}
        diff = sorted(((v[1] - ca.get(k, 0)) / steps, k) for k, v in b.stats.items())[::-1][:top]
        for c, (file, line, name) in diff: print(f"  {c:7.2f}  {name}  {Path(file).name}:{line}")
    return (b.total_calls - a.total_calls) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--commit')
    parser.add_argument('--steps', type=int, default=300)
    parser.add_argument('--top', type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dl = overhead.make_data()
    with tempfile.TemporaryDirectory() as src, tempfile.TemporaryDirectory() as out:
        classes = {'': ab_commit.Learner}
        if args.commit: classes[f' ({args.commit})'] = ab_commit.learner_at(args.commit, Path(src))

        def hand():
            yield lambda n: overhead.hand(dl, n, out)  # (a new model and optimizer each time, as a learner has)
        rows = {'hand': per_step(hand, args.steps)}
        for tag, cls in classes.items():
            for name, default_cbs, no_bar in (('default', True, False), ('no_bar', True, True), ('bare', False, False)):
                top = args.top if (name == 'default' and tag == '') else 0
                if top: print(f"most calls a step, default:")
                rows[name + tag] = per_step(lambda: run_learner(cls, dl, args.steps, out, default_cbs, no_bar),
                                            args.steps, top)
    print(f"Python calls a step (cProfile, MLP of overhead.py, {args.steps} and {2 * args.steps} steps, "
          f"torch {torch.__version__})")
    print("| variant | calls a step | over hand |")
    print("|---|---|---|")
    for name, c in rows.items(): print(f"| {name} | {c:.1f} | {c - rows['hand']:+.1f} |")


if __name__ == '__main__': main()
