"""Overhead of the Learner against a hand-written PyTorch loop, in one process.

The same tiny MLP (32 -> 64 -> 10, batch 64, AdamW) is trained for 2000 steps, on 1 thread, by:
  - `hand`:    a hand-written loop (forward, loss, backward, step, zero_grad);
  - `default`: a Learner with its default callbacks (Recorder, ProgressCallback, WriterCallback writing
               metrics.json), its console output sent to a file;
  - `default_no_plot`: the same without `LivePlotCallback`, whose one cost outside the loop is the final
               `plot.png` it renders at the end of each fit (about 0.1 s);
  - `bare`:    a Learner with no callbacks at all;
  - `toolkit`: the default callbacks plus a one-cycle schedule (`fit_one_cycle`), `GradientClip` and
               `TerminateOnNaN`: a typical set of the training toolkit; compared with
  - `hand_toolkit`: the hand-written loop doing the same by hand (torch's OneCycleLR, clip_grad_norm_, a check
               of the loss), so that the ratio shows the toolkit's overhead, not the work it does.
The variants run interleaved, in a rotating order, for several rounds; we report the median time of each
and the median over rounds of the ratio to `hand` in the same round. Then, separately (tracemalloc slows
things down), the peak Python memory of each variant, and the import time of trainer_nb beyond torch.

Run: python bench/overhead.py [--rounds 7] [--steps 2000]
     python bench/overhead.py --final-figure 8   (the final figure's cost alone, first fit and median)
"""
import argparse
import contextlib
import io
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.callback.tracker import TerminateOnNaN  # noqa: E402
from trainer_nb.callback.training import GradientClip  # noqa: E402
from trainer_nb.learner import Learner  # noqa: E402

BS, N_BATCHES = 64, 100


def make_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BS * N_BATCHES, 32, generator=g)
    y = torch.randint(0, 10, (BS * N_BATCHES,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=BS, shuffle=True, generator=torch.Generator().manual_seed(0))


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def hand(dl, steps, out, model=None, opt_func=torch.optim.AdamW, loss_func=nn.functional.cross_entropy):
    model = make_model() if model is None else model
    opt = opt_func(model.parameters(), lr=1e-3)
    model.train()
    done = 0
    while done < steps:
        for xb, yb in dl:
            loss = loss_func(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == steps: break
    return model


def hand_toolkit(dl, steps, out):
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=steps, pct_start=0.25)
    model.train()
    done = 0
    while done < steps:
        for xb, yb in dl:
            loss = nn.functional.cross_entropy(model(xb), yb)
            if not torch.isfinite(loss): return model
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == steps: break
    return model


def learner(dl, steps, out, default_cbs, toolkit=False, plot=True):
    cbs = [GradientClip(1.0), TerminateOnNaN()] if toolkit else []
    learn = Learner(make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=out, device='cpu',
                    default_cbs=default_cbs, cbs=cbs)
    if not plot: learn.remove_cb('live_plot')
    with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f):
        if toolkit: learn.fit_one_cycle(n_steps=steps, lr_max=1e-3)
        else: learn.fit(n_steps=steps)
    return learn.model


VARIANTS = {
    'hand': lambda dl, steps, out: hand(dl, steps, out),
    'default': lambda dl, steps, out: learner(dl, steps, out, True),
    'default_no_plot': lambda dl, steps, out: learner(dl, steps, out, True, plot=False),
    'bare': lambda dl, steps, out: learner(dl, steps, out, False),
    'toolkit': lambda dl, steps, out: learner(dl, steps, out, True, toolkit=True),
    'hand_toolkit': lambda dl, steps, out: hand_toolkit(dl, steps, out),
}
BASELINE = {'default': 'hand', 'default_no_plot': 'hand', 'bare': 'hand', 'toolkit': 'hand_toolkit', 'hand': 'hand', 'hand_toolkit': 'hand_toolkit'}


def timed(name, dl, steps, out):
    t0 = time.perf_counter()
    VARIANTS[name](dl, steps, out)
    return time.perf_counter() - t0


def peak_memory(name, dl, steps, out):
    tracemalloc.start()
    VARIANTS[name](dl, steps, out)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def import_time(repeats=5):
    code = ("import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); "
            "import trainer_nb.all; t2 = time.perf_counter(); print(t1 - t0, t2 - t1)")
    root = Path(__file__).resolve().parent.parent
    runs = [tuple(map(float, subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                                            check=True, cwd=root).stdout.split())) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def final_figure(dl, fits):
    "The seconds the live plot's final figure (`plot.png`, headless) takes: first fit, then the median of `fits`."
    for name in ('default', 'toolkit'):
        seconds = []
        for _ in range(fits + 1):
            with tempfile.TemporaryDirectory() as out:
                learn = Learner(make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=out, device='cpu')
                with contextlib.redirect_stdout(io.StringIO()):
                    if name == 'toolkit': learn.fit_one_cycle(n_steps=300, lr_max=1e-3)
                    else: learn.fit(n_steps=300)
                seconds.append(learn.live_plot.stats['final'])
        print(f"final figure, {name}: first fit {seconds[0] * 1000:.0f} ms, then median "
              f"{statistics.median(seconds[1:]) * 1000:.1f} ms over {fits} fits")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--steps', type=int, default=2000)
    parser.add_argument('--final-figure', type=int, metavar='FITS',
                        help="only time the live plot's final figure over this many 300-step fits")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dl = make_data()
    if args.final_figure: return final_figure(dl, args.final_figure)
    names = list(VARIANTS)
    times = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as out:
        for n in names: timed(n, dl, 200, out)  # warm-up
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order: times[n].append(timed(n, dl, args.steps, out))
        memory = {n: peak_memory(n, dl, args.steps, out) for n in names}
    torch_s, ours_s = import_time()
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, {args.steps} steps, "
          f"{args.rounds} rounds, 1 thread")
    print("| variant | median time (s) | compared with | median ratio | peak Python memory (MiB) |")
    print("|---|---|---|---|---|")
    for n in names:
        base = BASELINE[n]
        ratios = [t / h for t, h in zip(times[n], times[base])]
        print(f"| {n} | {statistics.median(times[n]):.3f} | {base} | {statistics.median(ratios):.3f}x | "
              f"{memory[n] / 2**20:.2f} |")
    print(f"\nimport torch: {torch_s:.3f} s; import trainer_nb.all after torch: {ours_s * 1000:.1f} ms")


if __name__ == '__main__': main()
