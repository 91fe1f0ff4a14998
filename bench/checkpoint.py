"""The cost of a checkpoint for the digits model: `learn.save` (the whole state, atomic, fsync) against a bare
`torch.save` of the model and optimizer state to the same disk, and `learn.load`.

Run: python bench/checkpoint.py [--repeats 30]
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.demo import digits_learner  # noqa: E402


def median_time(f, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter(); f(); times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeats', type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        learn = digits_learner(path=tmp, progress=False)
        learn.fit(2)  # optimizer state and a storage history exist
        bare = Path(tmp) / 'bare.pt'
        save = median_time(lambda: learn.save('last'), args.repeats)
        raw = median_time(lambda: torch.save({'model': learn.model.state_dict(), 'opt': learn.opt.state_dict()}, bare),
                          args.repeats)
        load = median_time(lambda: learn.load('last'), args.repeats)
        size = learn.checkpoint_path('last').stat().st_size
        n_params = sum(p.numel() for p in learn.model.parameters())
    print(f"digits MLP: {n_params} parameters, checkpoint {size / 1024:.0f} KiB "
          f"(model, AdamW state, storage of {learn.step} steps, RNG states)")
    print(f"learn.save: {save * 1000:.2f} ms (median of {args.repeats}); bare torch.save of model+opt: "
          f"{raw * 1000:.2f} ms; ratio {save / raw:.1f}x")
    print(f"learn.load: {load * 1000:.2f} ms")


if __name__ == '__main__': main()
