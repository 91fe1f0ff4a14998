"""Memory of a long run's logging, and what the history costs in every checkpoint.

1. Bytes per step of `EventStorage`: `put_scalar` of 6 scalars per step (what the Recorder logs each step:
   train/loss, lr, samples, time/step, time/data, plus one more, e.g. a metric), for `--steps` steps (default 1e6),
   measured with tracemalloc (Python allocations) in one pass and as the growth of the process's RSS in another.
2. The size of the storage's `state_dict` in a checkpoint (it carries the whole history), and the time to save it
   atomically, to load it with `weights_only=True`, and to restore a storage from it, at 1e4, 1e5 and 1e6 steps
   of history.

Run: python bench/storage_memory.py [--steps 1000000]
"""
import argparse
import gc
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.checkpoint import load_checkpoint  # noqa: E402
from trainer_nb.files import atomic_save  # noqa: E402
from trainer_nb.events import EventStorage  # noqa: E402

SCALARS = (('train/loss', True), ('lr', False), ('samples', False), ('time/step', True), ('time/data', True),
           ('train/acc', True))


def fill(storage: EventStorage, steps: int, rng: random.Random):
    "What a fit logs: 6 scalars at each step (plain floats, as the Recorder puts them), then the next iteration."
    for step in range(steps):
        storage.step()
        for name, hint in SCALARS:
            value = float(step * 64) if name == 'samples' else rng.random()
            storage.put_scalar(name, value, smoothing_hint=hint)
    for name, _ in SCALARS: storage.history(name).values()  # materialize what is pending


def rss() -> int:
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS:'): return int(line.split()[1]) * 1024
    return 0


def per_step_memory(steps: int):
    gc.collect()
    before = rss()
    t0 = time.perf_counter()
    storage = EventStorage()
    fill(storage, steps, random.Random(0))
    took = time.perf_counter() - t0
    gc.collect()
    rss_bytes = rss() - before
    del storage
    gc.collect()
    tracemalloc.start()
    storage = EventStorage()
    fill(storage, steps, random.Random(0))
    gc.collect()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"EventStorage, {len(SCALARS)} scalars x {steps:,} steps ({took:.1f} s to log, "
          f"{took / steps / len(SCALARS) * 1e9:.0f} ns per put_scalar):")
    print(f"  tracemalloc: {traced / 2**20:.1f} MiB = {traced / steps:.0f} bytes per step "
          f"({traced / steps / len(SCALARS):.0f} per value)")
    print(f"  RSS growth:  {rss_bytes / 2**20:.1f} MiB = {rss_bytes / steps:.0f} bytes per step")
    return storage


def checkpoint_cost(sizes):
    print("A checkpoint's storage entry (the whole history, 6 scalars per step); saved with atomic_save (fsync), "
          "loaded with weights_only=True:")
    with tempfile.TemporaryDirectory() as tmp:
        for steps in sizes:
            storage = EventStorage()
            fill(storage, steps, random.Random(0))
            path = Path(tmp) / f'history_{steps}.pt'
            t0 = time.perf_counter(); atomic_save({'storage': storage.state_dict()}, path); save = time.perf_counter() - t0
            t0 = time.perf_counter(); state = load_checkpoint(path); load = time.perf_counter() - t0
            t0 = time.perf_counter(); EventStorage().load_state_dict(state['storage']); restore = time.perf_counter() - t0
            size = path.stat().st_size
            print(f"  {steps:>9,} steps: {size / 2**20:8.1f} MiB ({size / steps:.0f} bytes per step), "
                  f"save {save * 1000:8.0f} ms, load {load * 1000:8.0f} ms, into a storage {restore * 1000:6.0f} ms")
            path.unlink()
            del storage
            gc.collect()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=1_000_000)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}")
    per_step_memory(args.steps)
    gc.collect()
    checkpoint_cost([s for s in (10_000, 100_000, 1_000_000) if s <= args.steps])


if __name__ == '__main__': main()
