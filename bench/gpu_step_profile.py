"""Where a Learner's step on a GPU spends what a hand loop does not: the small CNN of bench/gpu_bench.py in bf16, eager.

1. The host syncs of the learner's steps, each with the line of trainer_nb (or of the hand loop) that made it.
2. torch.profiler over the same steps of each: CUDA kernels launched a step, and the operators whose host time a
   step differs most between the two (the learner's extra work on the host, which a small model's step waits for).

Run: python bench/gpu_step_profile.py [--steps 20] [--warm 10] [--model conv|bert]
Without a CUDA device it prints "no CUDA device: nothing measured" and exits with 0.
"""
import argparse
import collections
import sys
import tempfile
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_bench import HandRun, LearnerRun  # noqa: E402


def sync_sites(runner, warm: int, steps: int) -> collections.Counter:
    "Where the host syncs of steps warm+1..warm+steps come from: the innermost frame of trainer_nb or of this bench."
    sites, counting = collections.Counter(), [False]
    def note(message, category, filename, lineno, file=None, line=None):
        if not counting[0] or 'synchroniz' not in str(message): return
        frames = [f for f in traceback.extract_stack()[:-1] if 'trainer_nb' in f.filename or 'bench' in f.filename]
        f = frames[-1] if frames else None
        sites[f"{Path(f.filename).name}:{f.lineno} {f.line}" if f else f"{Path(filename).name}:{lineno}"] += 1
    def mark(i):
        if i == warm: counting[0] = True
        if i == warm + steps: counting[0] = False
    with warnings.catch_warnings():
        warnings.simplefilter('always')
        warnings.showwarning = note
        torch.cuda.set_sync_debug_mode('warn')
        try: runner.run(warm + steps, mark)
        finally: torch.cuda.set_sync_debug_mode(0)
    return sites


def profile(runner, warm: int, steps: int):
    "torch.profiler's operator table over steps warm+1..warm+steps: {name: (calls, host us)} a step, and kernels a step."
    from torch.profiler import ProfilerActivity, profile as torch_profile
    prof = torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    def mark(i):
        if i == warm:
            torch.cuda.synchronize()
            prof.__enter__()
        if i == warm + steps:
            torch.cuda.synchronize()
            prof.__exit__(None, None, None)
    runner.run(warm + steps, mark)
    ops = {e.key: (e.count / steps, e.self_cpu_time_total / steps) for e in prof.key_averages()}
    kernels = sum(e.count for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA) / steps
    return ops, kernels


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument('--warm', type=int, default=10)
    parser.add_argument('--model', default='conv', choices=['conv', 'bert'])
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing measured")
        return
    with tempfile.TemporaryDirectory() as path:
        runners = {'learner': LearnerRun(args.model, torch.bfloat16, False, path),
                   'hand': HandRun(args.model, torch.bfloat16, False)}
        for runner in runners.values(): runner.run(args.warm)
        for key, runner in runners.items():
            sites = sync_sites(runner, args.warm, args.steps)
            print(f"{key}: {sum(sites.values())} host syncs in {args.steps} steps")
            for site, n in sites.most_common(8): print(f"   {n:3d}  {site}")
        tables = {key: profile(runner, args.warm, args.steps) for key, runner in runners.items()}
    (lops, lk), (hops, hk) = tables['learner'], tables['hand']
    print(f"CUDA kernels a step: learner {lk:.1f}, hand {hk:.1f}")
    print(f"host time a step in operators: learner {sum(v[1] for v in lops.values()):.0f} us, "
          f"hand {sum(v[1] for v in hops.values()):.0f} us")
    diff = {k: (lops.get(k, (0, 0))[0] - hops.get(k, (0, 0))[0], lops.get(k, (0, 0))[1] - hops.get(k, (0, 0))[1])
            for k in set(lops) | set(hops)}
    print("operators a step, learner minus hand (calls, host us), largest first:")
    for name, (calls, us) in sorted(diff.items(), key=lambda kv: -abs(kv[1][1]))[:25]:
        print(f"   {calls:+6.1f} calls {us:+8.1f} us  {name}")


if __name__ == '__main__':
    main()
