"""Overhead of the notebook display (progress bars, live plot, control panel), measured in a real Jupyter kernel.

A kernel is started with jupyter_client, and each fit runs as a cell, as a user runs it; this script reads the
kernel's messages (the displays it sends) as a frontend would. The same MLP as `bench/overhead.py`
(32 -> 64 -> 10, batch 64, AdamW, 1 thread), on 1000 training batches per epoch and 10 validation batches, for
`--steps` optimizer steps, with these callbacks:
  - `plain`:    Recorder, WriterCallback (metrics.json): the loop without any display;
  - `bars`:     plain + ProgressCallback (fastprogress bars and table, HTML in the kernel);
  - `notebook`: plain + ControlPanelCallback + ProgressCallback + LivePlotCallback: what a notebook shows.
The variants run interleaved, in a rotating order, for `--rounds` rounds, after one warm-up fit each (which
pays the imports of fastprogress, ipywidgets and matplotlib). We report the median fit time of each variant,
the median over rounds of its ratio to `plain` in the same round, by wall time and by the kernel process's CPU
time (less sensitive to other processes on a shared machine), and the live plot's own accounting
(`learn.live_plot.stats`: frames, seconds spent with the first frame and the final figure, the time from the first
batch to the first frame, the longest time between two frames). Because wall-time ratios on a shared 2-core
machine move by several percent from run to run, we also time the display callbacks from inside: each one is
wrapped so that the seconds spent in its event handlers add up (`time in the display callbacks`, as a share of
the fit's wall time); that is their direct cost, without the noise of the rest. Then `plain` and `notebook` on a
long fit (`--long-steps`). First of all, in the fresh kernel, a plain fit and a notebook fit of `--steps`: the
cost of the first notebook fit (imports included), and its first frame in a cold kernel. `--only-cold` runs just
those two.

Then how fresh the live plot is (`--fresh-epochs`, 0 to skip): the README's digits fit (30 epochs, 690 steps, the
default callbacks; `--fresh-delay` seconds of sleep added to each training batch, so that it lasts about 20 s, as
the fit of issue 40 did) in the same kernel, reading every plot image the kernel sends, with the time it came: the times
at which the picture changed, from the start of the fit, and the longest time it stayed the same. With the live plot
of issue 40 (frames drawn by a drawing process), `learn.live_plot.frame_log` also gives each frame's age when shown
(the seconds from the snapshot to the display), printed as the largest.

`--code PATH` runs another checkout's trainer_nb in the kernel, with this script: `--code /path/to/main` measures
the code before a change, for an A/B of the same measurements (run them one after the other on the same machine).

Run: python bench/notebook_overhead.py [--rounds 7] [--steps 20000] [--long-steps 100000] [--long-rounds 2]
                                       [--seconds S] [--long-seconds S] [--only-cold] [--fresh-epochs 30]
                                       [--only-fresh] [--code PATH]
(`--seconds 30` and `--long-seconds 300` choose the steps for fits of about 30 s and 5 min on this machine.)
"""
import argparse
import base64
import hashlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jupyter_client

SETUP = '''
import json, tempfile, time, torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainer_nb.learner import Learner
from trainer_nb.callback.core import Callback
from trainer_nb.callback.recorder import Recorder, WriterCallback
from trainer_nb.callback.progress import ProgressCallback
from trainer_nb.callback.liveplot import LivePlotCallback
from trainer_nb.callback.panel import ControlPanelCallback

torch.set_num_threads(1)
BS = 64
def loader(n_batches, seed, shuffle):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn(BS * n_batches, 32, generator=g), torch.randint(0, 10, (BS * n_batches,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=BS, shuffle=shuffle,
                      generator=torch.Generator().manual_seed(seed) if shuffle else None)
dls = (loader(1000, 0, True), loader(10, 1, False))

DISPLAYS = {
    'plain': lambda: [],
    'bars': lambda: [ProgressCallback()],
    'notebook': lambda: [ControlPanelCallback(), ProgressCallback(), LivePlotCallback()],
}

class Timed(Callback):
    "Run `cb`, adding up the time spent in its event handlers (the display's own cost, measured from inside)."
    def __init__(self, cb):
        self.cb, self.order, self.seconds = cb, cb.order, 0.
    @property
    def name(self): return self.cb.name
    def handlers(self):
        return {event: self._timed(fn) for event, fn in self.cb.handlers().items()}
    def _timed(self, fn):
        def run():
            self.cb.learn = self.learn
            t = time.perf_counter()
            try: fn()
            finally: self.seconds += time.perf_counter() - t
        return run

def make(name):
    "A learner with the callbacks of variant `name` (its display callbacks timed)."
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    displays = [Timed(cb) for cb in DISPLAYS[name]()]
    return Learner(model, dls, nn.functional.cross_entropy, lr=1e-3, path=tempfile.mkdtemp(), device='cpu',
                   default_cbs=False, cbs=[Recorder(), *displays, WriterCallback()]), displays

PREPARED = None  # a learner made in an earlier cell (--two-cells), for the next `bench`

def bench(name, steps):
    global PREPARED
    (learn, displays), PREPARED = PREPARED or make(name), None
    t0, c0 = time.perf_counter(), time.process_time()
    learn.fit(n_steps=steps)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    plot = next((d.cb.stats for d in displays if isinstance(d.cb, LivePlotCallback)), None)
    inside = sum(d.seconds for d in displays)
    print('BENCH ' + json.dumps({'variant': name, 'seconds': seconds, 'cpu': cpu, 'inside': inside, 'plot': plot}),
          flush=True)
'''


def run_cell(kc, code, timeout=3600, on_message=None):
    "Execute `code`, reading every message it causes (as a frontend does); return what it printed."
    msg_id = kc.execute(code)
    out, deadline = [], time.time() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(deadline - time.time(), 1))
        if msg['parent_header'].get('msg_id') != msg_id: continue
        if on_message: on_message(msg)
        if msg['msg_type'] == 'stream': out.append(msg['content']['text'])
        elif msg['msg_type'] == 'error': raise RuntimeError('\n'.join(msg['content']['traceback']))
        elif msg['msg_type'] == 'status' and msg['content']['execution_state'] == 'idle': break
    kc.get_shell_msg(timeout=timeout)
    return ''.join(out)


def bench(kc, name, steps) -> dict:
    out = run_cell(kc, f"bench({name!r}, {steps})")
    return json.loads(next(l for l in out.splitlines() if l.startswith('BENCH '))[6:])


def ratios(runs, ref, key='seconds'):
    return [r[key] / p[key] for r, p in zip(runs, ref)]


def plot_share(runs):
    plots = [r['plot'] for r in runs if r['plot']]
    if not plots: return '| | | | | |'
    return (f"| {statistics.median(p['redraws'] for p in plots):.0f} | {statistics.median(p['spent'] for p in plots):.3f} "
            f"| {statistics.median(p['spent'] / p['elapsed'] for p in plots):.2%} "
            f"| {statistics.median(p['first_frame'] for p in plots):.2f} | {max(p['max_gap'] for p in plots):.1f} |")


def first_fit(kc, steps, two_cells: bool = False) -> str:
    """A plain fit, then a notebook fit, in a fresh kernel (the second pays the imports): a line to print.

    `two_cells`: the notebook learner is made in one cell and fitted in the next, run right after it (as Run All
    does): the display's imports, started in the background when the learner is made, may still be running."""
    plain = bench(kc, 'plain', steps)
    if two_cells: run_cell(kc, "PREPARED = make('notebook')")
    cold = bench(kc, 'notebook', steps)
    p = cold['plot']
    how = 'the learner made in the cell before' if two_cells else 'the learner made in the same cell'
    return (f"first notebook fit in a fresh kernel ({steps} steps, {how}): {cold['seconds']:.3f} s against "
            f"{plain['seconds']:.3f} s plain ({cold['seconds'] / plain['seconds']:.3f}x); display callbacks "
            f"{cold['inside']:.3f} s ({cold['inside'] / cold['seconds']:.2%}); its plot: first frame {p['first_frame']:.2f} s "
            f"after the first batch (costing {p['first_cost']:.3f} s, the import of matplotlib included), "
            f"{p['redraws']} frames {p['kinds']}, at most {p['max_gap']:.1f} s apart, {p['spent']:.3f} s in all "
            f"({p['spent'] / p['elapsed']:.2%}), of which the final figure {p['final']:.3f} s")


FRESH = '''
from trainer_nb.learner import Learner
from trainer_nb.demo import digits_dls, digits_model
from trainer_nb.metrics import accuracy
torch.manual_seed(0)
fresh = Learner(digits_model(), digits_dls(), nn.functional.cross_entropy, lr=1e-2, metrics=[accuracy],
                path=tempfile.mkdtemp())
from trainer_nb.callback.core import LambdaCallback
delay = lambda seconds: [LambdaCallback(before_batch=lambda l: l.training and time.sleep(seconds))] if seconds else []
'''


def freshness(kc, epochs, delay) -> str:
    "The README's digits fit with the default callbacks: when its plot image changed, read as a frontend reads it."
    run_cell(kc, FRESH)
    images = []  # (time received, hash of the PNG)
    def on_message(msg):
        data = msg['content'].get('data', {})
        if msg['msg_type'] in ('display_data', 'update_display_data') and 'image/png' in data:
            images.append((time.time(), hashlib.sha1(base64.b64decode(data['image/png'])).hexdigest()))
    t0 = time.time()
    run_cell(kc, f"fresh.fit({epochs}, cbs=delay({delay}))", on_message=on_message)
    t_end = time.time()
    out = run_cell(kc, "s = fresh.live_plot.stats; log = getattr(fresh.live_plot, 'frame_log', [])\n"
                       "print('FRESH ' + json.dumps({'stats': s, 'ages': [f['age'] for f in log], 'steps': fresh.step}))")
    info = json.loads(next(l for l in out.splitlines() if l.startswith('FRESH '))[6:])
    changes = [t - t0 for i, (t, h) in enumerate(images) if i == 0 or h != images[i - 1][1]]
    gaps = [b - a for a, b in zip(changes, changes[1:] + [t_end - t0])]
    s, ages = info['stats'], info['ages']
    slowed = f", {delay * 1000:g} ms of sleep added to each training batch" if delay else ''
    return (f"freshness: the README's digits fit ({epochs} epochs, {info['steps']} steps{slowed}) took {t_end - t0:.1f} s; "
            f"{len(images)} plot images, the picture changed at {', '.join(f'{c:.1f}' for c in changes)} s "
            f"(longest unchanged: {max(gaps):.1f} s, the last one to the end of the fit included); plot frames "
            f"{s['redraws']} {s['kinds']}, cost on the loop {s['spent']:.3f} s ({s['spent'] / s['elapsed']:.2%}) of "
            f"which the final figure {s['final']:.3f} s"
            + (f"; frames drawn by the drawing process: {len(ages)}, their data at most {max(ages):.2f} s old when "
               f"shown (median {statistics.median(ages):.2f} s)" if ages else "; no drawing process"))


def calibrate(kc, args):
    "Set `--steps` and `--long-steps` from `--seconds` and `--long-seconds`, at the speed of a plain fit here."
    rate = 4000 / bench(kc, 'plain', 4000)['seconds']
    if args.seconds: args.steps = int(round(rate * args.seconds, -3))
    if args.long_seconds: args.long_steps = int(round(rate * args.long_seconds, -3))
    print(f"{rate:.0f} steps/s: {args.steps} steps for --seconds, {args.long_steps} for --long-seconds", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--steps', type=int, default=20000)
    parser.add_argument('--long-steps', type=int, default=100000, help='a long fit, where the live plot redraws')
    parser.add_argument('--long-rounds', type=int, default=2)
    parser.add_argument('--only-cold', action='store_true', help='only the first fits in a fresh kernel (--steps)')
    parser.add_argument('--two-cells', action='store_true',
                        help='in the fresh kernel, make the notebook learner in a cell and fit it in the next')
    parser.add_argument('--seconds', type=float, help='instead of --steps: steps for fits of about this length')
    parser.add_argument('--long-seconds', type=float, help='instead of --long-steps: the same for the long fit')
    parser.add_argument('--fresh-epochs', type=int, default=30, help="the README's digits fit, to see how fresh the "
                        "live plot is (0: skip)")
    parser.add_argument('--fresh-delay', type=float, default=0.025, help='seconds of sleep added to each training '
                        "batch of that fit (the issue's fit took 20 s; 0.025 makes it about as long here)")
    parser.add_argument('--only-fresh', action='store_true', help='only that fit (in a fresh kernel)')
    parser.add_argument('--code', help='the checkout whose trainer_nb the kernel imports (default: this one)')
    args = parser.parse_args()
    root = Path(args.code).resolve() if args.code else Path(__file__).resolve().parent.parent
    km = jupyter_client.KernelManager(kernel_name='python3')
    km.start_kernel(cwd=tempfile.mkdtemp())
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        run_cell(kc, f"import sys; sys.path.insert(0, {str(root)!r})\n" + SETUP)
        print(run_cell(kc, "import trainer_nb; print('trainer_nb from', trainer_nb.__file__)").strip(), flush=True)
        if args.only_fresh:
            print(freshness(kc, args.fresh_epochs, args.fresh_delay))
            return
        if args.seconds or args.long_seconds: calibrate(kc, args)
        cold = first_fit(kc, args.steps, args.two_cells)  # a fresh kernel: imports fastprogress, ipywidgets, matplotlib
        if args.only_cold:
            print(cold)
            return
        names = ['plain', 'bars', 'notebook']
        for n in names: bench(kc, n, 1000)  # warm-up
        runs = {n: [] for n in names}
        for r in range(args.rounds):
            for n in names[r % 3:] + names[:r % 3]: runs[n].append(bench(kc, n, args.steps))
        long = {'plain': [], 'notebook': []}
        for r in range(args.long_rounds):
            for n in (['plain', 'notebook'] if r % 2 == 0 else ['notebook', 'plain']):
                long[n].append(bench(kc, n, args.long_steps))
        fresh = freshness(kc, args.fresh_epochs, args.fresh_delay) if args.fresh_epochs else ''
        versions = run_cell(kc, "import ipykernel, matplotlib, ipywidgets, fastprogress, torch, sys\n"
                                "print(sys.version.split()[0], torch.__version__, ipykernel.__version__, "
                                "ipywidgets.__version__, matplotlib.__version__, fastprogress.__version__)")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)

    py, torch_v, ipk, ipw, mpl, fp = versions.split()
    print(f"python {py}, torch {torch_v}, ipykernel {ipk}, ipywidgets {ipw}, matplotlib {mpl}, fastprogress {fp}; "
          f"1 thread; {args.rounds} rounds of {args.steps} steps, {args.long_rounds} of {args.long_steps}")
    print("| variant | steps | median fit time (s) | median ratio to plain (wall) | median ratio to plain (kernel CPU) "
          "| time in the display callbacks | plot frames | plot cost (s) | plot share of the fit "
          "| first frame after the first batch (s) | longest gap between frames (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for table, steps in ((runs, args.steps), (long, args.long_steps)):
        for n, rs in table.items():
            print(f"| {n} | {steps} | {statistics.median(r['seconds'] for r in rs):.3f} "
                  f"| {statistics.median(ratios(rs, table['plain'])):.3f}x "
                  f"| {statistics.median(ratios(rs, table['plain'], 'cpu')):.3f}x "
                  f"| {statistics.median(r['inside'] / r['seconds'] for r in rs):.2%} {plot_share(rs)}")
    print('\n' + cold)
    if fresh: print('\n' + fresh)


if __name__ == '__main__': main()
