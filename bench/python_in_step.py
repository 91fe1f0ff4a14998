"""What plain Python costs inside a training step, against what it costs timed alone.

The hand loop of `overhead.py` (the MLP, 1 thread), and the same loop with `--calls` calls of a small Python
function added after each step (attribute writes and reads, no tensor work). The added work is first timed alone;
then both loops run interleaved, `--rounds` times, and the difference of their fastest rounds is what it cost in the
step. Where the second is larger than the first, Python glue in a training loop (a learner's, its callbacks') costs
more than a micro-benchmark of it says: the step's kernels and the glue evict each other's data and branch history.

Run: python bench/python_in_step.py [--calls 400] [--rounds 21] [--steps 1000]
"""
import argparse
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead  # noqa: E402


class Slots:
    pass


def glue(obj: Slots, calls: int):
    "`calls` calls of a function that writes and reads an attribute, and two more attribute writes a call."
    def touch(o, v):
        o.a = v
        return o.a
    for i in range(calls):
        touch(obj, i)
        obj.b = i
        obj.c = obj.b


def hand(dl, steps: int, calls: int):
    "The hand loop of `overhead.py`, with `glue(calls)` after each step (none for 0)."
    model = overhead.make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    obj, done = Slots(), 0
    while done < steps:
        for xb, yb in dl:
            loss = torch.nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if calls: glue(obj, calls)
            done += 1
            if done == steps: break


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--calls', type=int, default=400)
    parser.add_argument('--rounds', type=int, default=21)
    parser.add_argument('--steps', type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dl, obj = overhead.make_data(), Slots()
    alone = min(timeit.repeat(lambda: glue(obj, args.calls), number=2000, repeat=5)) / 2000
    times = {0: [], args.calls: []}
    for calls in times: hand(dl, 200, calls)  # warm-up
    for r in range(args.rounds):
        for calls in (list(times) if r % 2 == 0 else list(times)[::-1]):
            t = time.perf_counter()
            hand(dl, args.steps, calls)
            times[calls].append((time.perf_counter() - t) / args.steps)
    base, added = min(times[0]), min(times[args.calls])
    ratio = statistics.median(a / b for a, b in zip(times[args.calls], times[0]))
    print(f"{args.calls} calls timed alone: {alone * 1e6:.1f} us; in the step (fastest rounds): "
          f"{(added - base) * 1e6:.1f} us ({base * 1e6:.1f} -> {added * 1e6:.1f} us a step, median ratio {ratio:.3f}x); "
          f"{(added - base) / alone:.2f}x its time alone")


if __name__ == '__main__':
    main()
