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

Run: python bench/loop_instructions.py [--commit 7dfc9bd] [--steps 1000]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab_commit  # noqa: E402


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


def count(variant: str, steps: int, commit: str | None) -> int:
    "The instructions counted in a child process running `variant`."
    cmd = ['valgrind', '--tool=callgrind', '--instr-atstart=no', '--callgrind-out-file=/dev/null', sys.executable,
           __file__, '--child', variant, '--steps', str(steps)] + (['--commit', commit] if commit else [])
    env = dict(os.environ, PYTHONHASHSEED='0')  # (string hashes change dict probing from run to run otherwise)
    run = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
    return int(re.search(r'Collected : (\d+)', run.stderr).group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--commit', help="also count the learner of this commit")
    parser.add_argument('--steps', type=int, default=1000)
    parser.add_argument('--child', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child: return child(args.child, args.steps, args.commit)
    variants = ['hand', 'bare', 'bare_noguard'] + (['bare_then'] if args.commit else [])
    per_step = {v: count(v, args.steps, args.commit) / args.steps for v in variants}
    print(f"instructions a step (tiny model, {args.steps} steps, torch {torch.__version__})")
    print("| variant | instructions a step | over hand |")
    print("|---|---|---|")
    for v in variants:
        print(f"| {v} | {per_step[v] / 1000:.1f}k | {(per_step[v] - per_step['hand']) / 1000:+.1f}k |")


if __name__ == '__main__': main()
