"""Why the live plot draws in a process: a training loop's speed while frames are drawn on a thread, or in the
drawing process (`trainer_nb.plot_worker`), against no drawing at all.

The loop is the MLP of `bench/overhead.py` (32 -> 64 -> 10, batch 64, AdamW, 1 thread), written by hand, for
`--steps` steps. Once a second, a frame of a three-panel figure (losses, metrics, lr; 400 points a curve) is drawn
on a new figure (the most a frame costs: a new figure, its axes, ticks and labels, the curves, the PNG):
- `none`: no frame;
- `thread`: on a thread of this process (the loop hands the snapshot over and goes on, as with the process);
- `process`: by the drawing process (`PlotWorker`: the snapshot handed over through a pipe, the PNG read back).
Each variant runs `--rounds` times, interleaved; we report the median steps a second and the loss against `none`.

Run: python bench/plot_thread_vs_process.py [--steps 20000] [--rounds 3]
"""
import argparse
import math
import statistics
import threading
import time

import torch
from torch import nn

from trainer_nb.plot_worker import FrameDrawer, PlotWorker, encode_snapshot, snapshot
from trainer_nb.plotting import PlotData


def curves(n=4000):
    "A fit's curves, as the live plot holds them (400 points a curve after thinning)."
    steps, vsteps = list(range(1, n + 1)), list(range(100, n + 1, 100))
    data = PlotData()
    data.update_series({'train/loss': (steps, [2 * math.exp(-s / 900) + 0.01 * (s % 7) for s in steps]),
                        'valid/loss': (vsteps, [2.2 * math.exp(-s / 900) for s in vsteps]),
                        'valid/accuracy': (vsteps, [1 - math.exp(-s / 900) for s in vsteps]),
                        'lr': (steps, [1e-3 * (1 + s / n) for s in steps])}, smoothed=['train/loss'])
    return data


def new_frame(i, snap):
    "The snapshot of frame `i`, on a figure of its own (another dpi each time): each frame drawn in full."
    return dict(snap, x_end=4000 + i, dpi=80 + i % 2)


def run(variant, steps, data):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))
    opt = torch.optim.AdamW(model.parameters(), 1e-3)
    x, y = torch.randn(64, 32), torch.randint(0, 10, (64,))
    snap = snapshot(data, 4000)
    drawer, worker, todo, frames = FrameDrawer(), None, [], [0]
    if variant == 'thread':
        lock = threading.Condition()
        def draw():
            while True:
                with lock:
                    while not todo: lock.wait()
                    i = todo.pop()
                if i is None: return
                drawer.draw(new_frame(i, snap))
                frames[0] += 1
        thread = threading.Thread(target=draw, daemon=True)
        thread.start()
        drawer.draw(new_frame(1, snap))  # (matplotlib imported before the loop)
    if variant == 'process':
        worker = PlotWorker()
        r = worker.submit(encode_snapshot(snap))
        while worker.poll(r) is None: time.sleep(0.01)  # (its matplotlib imported before the loop)
        request = None
    t0 = time.perf_counter()
    next_frame = t0 + 1
    for i in range(steps):
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        now = time.perf_counter()
        if variant == 'process' and request is not None and worker.poll(request) is not None:
            request, frames[0] = None, frames[0] + 1
        if variant != 'none' and now >= next_frame:
            next_frame = now + 1
            if variant == 'thread':
                with lock:
                    todo.append(i)
                    lock.notify()
            elif request is None:
                request = worker.submit(encode_snapshot(new_frame(i, snap)))
    seconds = time.perf_counter() - t0
    if variant == 'thread':
        with lock:
            todo.append(None)
            lock.notify()
    if worker is not None: worker.close()
    return steps / seconds, frames[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=20000)
    parser.add_argument('--rounds', type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = curves()
    names = ['none', 'thread', 'process']
    rates = {n: [] for n in names}
    frames = {n: [] for n in names}
    for r in range(args.rounds):
        for n in names[r % 3:] + names[:r % 3]:
            rate, count = run(n, args.steps, data)
            rates[n].append(rate)
            frames[n].append(count)
    base = statistics.median(rates['none'])
    print(f"torch {torch.__version__}, 1 thread, {args.rounds} rounds of {args.steps} steps")
    print("| frames drawn | median steps/s | loss against none | frames in a fit (median) |")
    print("|---|---|---|---|")
    for n in names:
        rate = statistics.median(rates[n])
        print(f"| {n} | {rate:.0f} | {1 - rate / base:.2%} | {statistics.median(frames[n]):.0f} |")


if __name__ == '__main__': main()
