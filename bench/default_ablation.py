"""The default learner minus one default callback at a time (and minus all of them), against the hand loop of
`overhead.py`: the time a step each callback costs in a fit of 2000 steps, its handlers and what they set off later
(the Recorder's numbers are what the writer writes and the final figure draws), fixed costs spread over the steps.
7 interleaved rounds, alternating the order; medians.

Run: python bench/default_ablation.py
"""
import contextlib, statistics, sys, tempfile, time
from pathlib import Path
import torch
from torch import nn
sys.path.insert(0, 'bench')
import overhead
from trainer_nb.learner import Learner
torch.set_num_threads(1)
STEPS, ROUNDS = 2000, 7
NAMES = ['throughput', 'control_panel', 'progress', 'live_plot', 'writer', 'run_record', 'preemption', 'recorder', 'save_on_stop']
def fit(dl, out, without=None):
    learn = Learner(overhead.make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=tempfile.mkdtemp(dir=out), device='cpu')
    if without == 'all':
        for n in NAMES: learn.remove_cb(n)
    elif without: learn.remove_cb(without)
    with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f):
        t0 = time.perf_counter(); learn.fit(n_steps=STEPS); return time.perf_counter() - t0
dl = overhead.make_data()
variants = ['hand', 'default', 'all'] + NAMES
times = {v: [] for v in variants}
with tempfile.TemporaryDirectory() as out:
    def run(v):
        if v == 'hand':
            t0 = time.perf_counter(); overhead.hand(dl, STEPS, out); return time.perf_counter() - t0
        return fit(dl, out, None if v == 'default' else v)
    for v in variants: run(v)
    for r in range(ROUNDS):
        order = variants if r % 2 == 0 else variants[::-1]
        for v in order: times[v].append(run(v))
d = statistics.median(times['default'])
for v in variants:
    m = statistics.median(times[v])
    print(f"{v:14s} {m / STEPS * 1e6:7.1f} us/step  ratio to hand {statistics.median(a / b for a, b in zip(times[v], times['hand'])):.3f}  saves vs default {(d - m) / STEPS * 1e6:+6.1f} us/step")
