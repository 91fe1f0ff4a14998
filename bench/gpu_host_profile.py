"""Where the host's time goes in a Learner's step on a GPU, against a hand loop: the small CNN of bench/gpu_bench.py,
bf16, eager.

`bench/gpu_bench.py` measured the default learner at 1.12-1.22x of a hand loop for this model on an H100, where a step
is about 4 ms of host work: 0.5-0.9 ms a step more, against about 0.08 ms a step for the learner's extra work on the
CPU (`bench/overhead.py`). `bench/gpu_step_profile.py` counted kernels and syncs; this counts the host's Python time.

1. ms a step, interleaved rounds (medians), of gpu_bench.py's runners: `hand`; `learner` (the default callbacks,
   progress=False); `no_guard` (the same with nan_guard=False); `immediate` (nan_guard='immediate': a host sync a
   step instead of the flag on the device); `no_undo` (the out-of-memory undo's copies at each batch's start left
   out, which the learner has no switch for: the bench replaces them); `bare` (no default callbacks, only
   MixedPrecision).
2. cProfile over `--steps` steps of `learner` and of `hand`: the functions with the most time of their own, in us a
   step, and the calls a step (a count that does not depend on the machine).

Run: python bench/gpu_host_profile.py [--steps 200] [--warm 20] [--rounds 3] [--device cuda]
(`--device cpu` runs the same on the CPU, to try the script; the figures that matter are the GPU's.)
"""
import argparse
import cProfile
import pstats
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import HandRun, LearnerRun, synchronize, timed_steps  # noqa: E402


class NoUndo:
    "A `BatchStart` (chapter `oom`) that takes nothing: what a batch's start costs without the undo's copies."
    batches_since_step = 0
    def take(self, state): self.batches_since_step = state.batches_since_step
    def restore(self, state): raise RuntimeError("no undo in this variant")


def without_undo(runner: LearnerRun) -> LearnerRun:
    part = runner.learn.out_of_memory
    part.watch = lambda model, device: setattr(part, 'start', NoUndo())  # (called at each epoch's start)
    return runner


def profiled(runner, warm: int, steps: int) -> dict:
    "cProfile over steps warm+1..warm+steps: {function: (us a step of its own, calls a step)}."
    prof = cProfile.Profile()
    def mark(i):
        if i == warm:
            synchronize()
            prof.enable()
        if i == warm + steps:
            synchronize()
            prof.disable()
    runner.run(warm + steps, mark)
    return {f"{Path(k[0]).name}:{k[1]}({k[2]})": (v[2] / steps * 1e6, v[1] / steps)
            for k, v in pstats.Stats(prof).stats.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=200)
    parser.add_argument('--warm', type=int, default=20)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--top', type=int, default=22)
    parser.add_argument('--device', default='cuda')
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == 'cuda' and not torch.cuda.is_available():
        print("no CUDA device: nothing measured")
        return
    with tempfile.TemporaryDirectory() as path:
        def learner(folder, **kwargs): return LearnerRun('conv', torch.bfloat16, False, f'{path}/{folder}', device, **kwargs)
        runners = {'hand': HandRun('conv', torch.bfloat16, False, device=device), 'learner': learner('a'),
                   'no_guard': learner('b', nan_guard=False), 'immediate': learner('d', nan_guard='immediate'),
                   'no_undo': without_undo(learner('e')), 'bare': learner('c', default_cbs=False)}
        for runner in runners.values(): runner.run(args.warm)
        ms = {k: [] for k in runners}
        for r in range(args.rounds):
            for key in list(runners)[r % len(runners):] + list(runners)[:r % len(runners)]:
                ms[key].append(timed_steps(runners[key], args.warm, args.steps))
        hand = statistics.median(ms['hand'])
        print(f"ms a step ({device}, {torch.__version__}; medians of {args.rounds} rounds of {args.steps} steps):")
        for key, values in ms.items():
            m = statistics.median(values)
            print(f"  {key:9s} {m:7.3f}  ({m / hand:.3f}x hand; rounds {', '.join(f'{v:.3f}' for v in values)})")
        tables = {key: profiled(runners[key], args.warm, args.steps) for key in ('learner', 'hand')}
    for key, table in tables.items():
        print(f"\n{key}: {sum(n for _, n in table.values()):.1f} calls a step, {sum(us for us, _ in table.values()):.0f} us a "
              "step under cProfile; most time of their own (us a step, calls a step):")
        for name, (us, n) in sorted(table.items(), key=lambda kv: -kv[1][0])[:args.top]: print(f"  {us:8.1f} {n:6.1f}  {name}")
    hand_table = tables['hand']
    more = {name: (us - hand_table.get(name, (0., 0.))[0], n - hand_table.get(name, (0., 0.))[1])
            for name, (us, n) in tables['learner'].items()}
    print("\nthe learner's time of its own a step beyond the hand loop's, by function (us, calls):")
    for name, (us, n) in sorted(more.items(), key=lambda kv: -kv[1][0])[:args.top]: print(f"  {us:8.1f} {n:6.1f}  {name}")


if __name__ == '__main__':
    main()
