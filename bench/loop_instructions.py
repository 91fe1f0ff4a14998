"""Machine instructions a training step costs, counted by valgrind: a measure of the loop's own work without timing noise.

Wall-clock ratios of the bare learner move by a percent or two from run to run here, more than the differences
worth finding. Valgrind's callgrind counts the instructions executed: with a fixed PYTHONHASHSEED (set here),
two runs of the same command give the same count (another command line, or a change anywhere in the package,
moves it by up to about 2k a step through memory layout alone). Each variant runs in a child process under callgrind, counting only while the
measured fit runs (`callgrind_control -i on/off` around it; a first short fit warms up): the tiny model of
`ab_commit.py --tiny` (one parameter, a list of 200 batches), for `--steps` steps:
  - `hand`: the hand-written loop;
  - `bare`, `bare_noguard`: a Learner with no callbacks, with and without the NaN guard;
  - `bare_then`: a Learner with no callbacks at `--commit` (extracted as in `ab_commit.py`).
Instructions are not time: a count that falls by 1% can leave the wall time where it was (caches, branch
prediction and allocation weigh too). Use it to see where the work is, and `ab_commit.py` for time.
Needs valgrind (apt-get install valgrind). Takes about 20 s a variant.

With `--mlp`, the variants of `overhead.py` instead (the issue's benchmark: the MLP, fits that include making the
learner, as `overhead.py` times them): `hand`, `bare`, `default`, and the default without one or more of its callbacks
(`default-writer`, `default-live_plot-progress`: callback names joined by `-`). Each is counted at two step counts
(`--steps` and three times as many); the difference gives the instructions a step, and what is left the fixed cost of
a fit (the learner made, `before_fit`, `after_fit` with its final figure and files). About a minute a variant.

With `--cache` (and `--mlp`), valgrind also simulates the caches and the branch predictor (`--cache-sim=yes
--branch-sim=yes`, slower): a table of a step's first-level cache misses (instruction and data) and mispredicted
branches, each to the hand loop's, and a rough cost in cycles, `Ir + 10 x L1 misses + 15 x mispredictions` (a textbook
weighting, not this machine's), to the hand loop's: a measure closer to the clock than instructions alone.

Run: python bench/loop_instructions.py [--commit 7dfc9bd] [--steps 1000]
     python bench/loop_instructions.py --mlp [--steps 500] [--variants hand,bare,default,default-writer]
     python bench/loop_instructions.py --mlp --cache [--steps 300] [--variants hand,bare,default]
"""
import argparse
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab_commit  # noqa: E402
import overhead  # noqa: E402


def counting(on: bool):
    "Turn callgrind's counting on or off in this process."
    subprocess.run(['callgrind_control', '-i', 'on' if on else 'off', str(os.getpid())], capture_output=True,
                   check=True)


def child(variant: str, steps: int, commit: str | None):
    "Run one variant, counting only its measured part."
    torch.set_num_threads(1)
    dl, out = ab_commit.tiny_data(), tempfile.mkdtemp()
    if variant == 'hand':
        ab_commit.tiny_hand(dl, 20, out)
        counting(True)
        ab_commit.tiny_hand(dl, steps, out)
        return counting(False)
    cls = ab_commit.learner_at(commit, Path(tempfile.mkdtemp())) if variant == 'bare_then' else ab_commit.Learner
    kwargs = {'nan_guard': False} if variant == 'bare_noguard' else {}  # (before the guard, `then` had none)
    learn = ab_commit.tiny_learner(cls, dl, out, **kwargs)
    learn.fit(n_steps=20)
    counting(True)
    learn.fit(n_steps=steps)
    counting(False)


def mlp_variant(name: str):
    "A variant of `overhead.py` (`hand`, `bare`, `default`), or `default-<callback>-...`: the default without those callbacks."
    if name in ('hand', 'bare', 'default'): return overhead.VARIANTS[name]
    base, *removed = name.split('-')
    if base != 'default' or not removed: raise ValueError(f"Unknown variant {name!r}: hand, bare, default, default-<callback>...")

    def fit(dl, steps: int, out: str):
        learn = ab_commit.Learner(overhead.make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=out, device='cpu')
        for cb in removed: learn.remove_cb(cb)
        with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f): learn.fit(n_steps=steps)
    return fit


def mlp_child(variant: str, steps: int):
    "Run one variant of the MLP benchmark, counting only its measured fit (two fits before it warm up)."
    torch.set_num_threads(1)
    dl, out, fit = overhead.make_data(), tempfile.mkdtemp(), mlp_variant(variant)
    for _ in range(2): fit(dl, 50, out)  # (imports, the first figure, the loader's workers: not the fit's cost)
    counting(True)
    fit(dl, steps, out)
    counting(False)


def a_step(variant: str, steps: int, cache: bool = False) -> tuple[dict, dict]:
    "The counts of `variant` a step and the fixed counts of a fit, by event (`Ir`: instructions), from fits of `steps` and `3 * steps` steps."
    short, long = (count(variant, n, None, mlp=True, cache=cache) for n in (steps, 3 * steps))
    if not cache: short, long = {'Ir': short}, {'Ir': long}
    step = {k: (long[k] - short[k]) / (2 * steps) for k in long}
    return step, {k: short[k] - steps * step[k] for k in short}


def cache_table(variants: list[str], steps: int):
    "A step's cache misses and mispredicted branches of each variant, from fits of `steps` and `3 * steps` steps (simulated)."
    print(f"simulated caches and branches, a step of the MLP benchmark (fits of {steps} and {3 * steps} steps)")
    print("| variant | instructions | L1 misses (I, D) | mispredicted branches | Ir + 10 x L1 + 15 x mispredicted |")
    print("|---|---|---|---|---|")
    rows = {}
    for v in variants:
        e, _ = a_step(v, steps, cache=True)
        rows[v] = (e['Ir'], e['I1mr'] + e['D1mr'] + e['D1mw'], e['Bcm'] + e['Bim'])
        rows[v] += (rows[v][0] + 10 * rows[v][1] + 15 * rows[v][2],)
        h = rows.get('hand', rows[v])
        print(f"| {v} | {rows[v][0] / 1e3:.1f}k ({rows[v][0] / h[0]:.3f}) | {rows[v][1] / 1e3:.1f}k ({rows[v][1] / h[1]:.3f}) "
              f"| {rows[v][2] / 1e3:.1f}k ({rows[v][2] / h[2]:.3f}) | {rows[v][3] / 1e3:.0f}k ({rows[v][3] / h[3]:.3f}) |", flush=True)


def mlp_table(variants: list[str], steps: int):
    "Instructions a step and a fit's fixed instructions of each variant, from fits of `steps` and `3 * steps` steps."
    print(f"instructions of the MLP benchmark of overhead.py (fits of {steps} and {3 * steps} steps, torch {torch.__version__})")
    print("| variant | a step | over hand | fixed, a fit | at 2000 steps, to hand |")
    print("|---|---|---|---|---|")
    costs = {}
    for v in variants:
        step, fixed = a_step(v, steps)
        costs[v] = step['Ir'], fixed['Ir']
        per_step, hand = costs[v][0], costs.get('hand', costs[v])
        ratio = (costs[v][1] + 2000 * per_step) / (hand[1] + 2000 * hand[0])
        print(f"| {v} | {per_step / 1e3:.1f}k | {(per_step - hand[0]) / 1e3:+.1f}k | {costs[v][1] / 1e6:.1f}M "
              f"| {ratio:.3f} |", flush=True)


def count(variant: str, steps: int, commit: str | None, mlp: bool = False, cache: bool = False):
    "The instructions counted in a child process running `variant`; with `cache`, every simulated event, by name."
    cmd = ['valgrind', '--tool=callgrind', '--instr-atstart=no', '--callgrind-out-file=/dev/null',
           *(['--cache-sim=yes', '--branch-sim=yes'] if cache else []), sys.executable,
           __file__, '--child', variant, '--steps', str(steps)] + (['--commit', commit] if commit else []) + \
          (['--mlp'] if mlp else [])
    env = dict(os.environ, PYTHONHASHSEED='0')  # (string hashes change dict probing from run to run otherwise)
    run = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    collected = [int(n) for n in re.search(r'Collected : ([\d ]+)', run.stderr).group(1).split()]
    if not cache: return collected[0]
    return dict(zip(re.search(r'Events +: ([\w ]+)', run.stderr).group(1).split(), collected))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--commit', help="also count the learner of this commit")
    parser.add_argument('--steps', type=int, default=1000)
    parser.add_argument('--mlp', action='store_true', help="overhead.py's MLP variants, a cost a step and a fixed cost")
    parser.add_argument('--variants', default='hand,bare,default', help="with --mlp: the variants, comma-separated")
    parser.add_argument('--cache', action='store_true', help="with --mlp: simulated cache misses and branches too")
    parser.add_argument('--child', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child: return mlp_child(args.child, args.steps) if args.mlp else child(args.child, args.steps, args.commit)
    if args.mlp and args.cache: return cache_table(args.variants.split(','), args.steps)
    if args.mlp: return mlp_table(args.variants.split(','), args.steps)
    variants = ['hand', 'bare', 'bare_noguard'] + (['bare_then'] if args.commit else [])
    per_step = {v: count(v, args.steps, args.commit) / args.steps for v in variants}
    print(f"instructions a step (tiny model, {args.steps} steps, torch {torch.__version__})")
    print("| variant | instructions a step | over hand |")
    print("|---|---|---|")
    for v in variants:
        print(f"| {v} | {per_step[v] / 1000:.1f}k | {(per_step[v] - per_step['hand']) / 1000:+.1f}k |")


if __name__ == '__main__': main()
