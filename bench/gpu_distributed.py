"""The GPU check of issue 34: two processes share one GPU over gloo, started from this process (process 0) after it
has used CUDA, which would poison a fork. One line per check; exit status 1 if one fails.

1. a fit on the GPU here (CUDA initialised in this process), then `launch` twice: both results right;
2. `distribute`: a fit stopped by an interrupt (SIGINT to this process, as the kernel's ■) at step 5, then
   `learn.resume()`: both processes' weights bit-identical to an uninterrupted distributed fit;
3. no process left; the times: the start of `distribute`, a call on its live workers, a step.

Run: python bench/gpu_distributed.py [--device cuda]   (also from bench/gpu_check.sh; --device cpu checks the logic)
"""
import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.all import Callback, DistributedTrainer, Learner, distribute, launch  # noqa: E402
from trainer_nb.demo import digits_dls, digits_model  # noqa: E402

DEVICE, FOLDER = 'cuda', tempfile.mkdtemp()
failures = []


def check(name, ok, detail=''):
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)
    if not ok: failures.append(name)


def make(run='one'):
    "A learner with a run folder of its own (`run`), so that no fit adds its lines to another's metrics.json."
    torch.manual_seed(0)
    return Learner(digits_model(), digits_dls(bs=32), nn.functional.cross_entropy, lr=3e-3, device=DEVICE,
                   progress=False, path=Path(FOLDER) / run, cbs=[DistributedTrainer(backend='gloo')])


def train(run):
    learn = make(run)
    learn.fit(1)
    return learn.rank, str(learn.device), learn.step, round(learn.storage.history('train/loss').latest(), 6)


class InterruptAt(Callback):
    "SIGINT to process 0 at step `n`, as the kernel's interrupt: a stop at the next batch boundary, in every process."
    def __init__(self, n): self.n = n
    def after_step(self):
        if self.learn.rank == 0 and self.learn.step == self.n and not getattr(self, 'done', False):
            self.done = True
            os.kill(os.getpid(), signal.SIGINT)


def weights(learn): return learn.workers.each(lambda l: [p.detach().cpu().clone() for p in l.model.parameters()])


def main():
    global DEVICE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--device', default='cuda')
    DEVICE = parser.parse_args().device
    if DEVICE == 'cuda' and not torch.cuda.is_available(): sys.exit("no GPU: run with --device cpu for the logic")
    os.environ.setdefault('TRAINER_NB_QUIET', '1')
    one = make()
    one.fit(1)  # (one process: DistributedTrainer does nothing)
    cuda_used = DEVICE != 'cuda' or torch.cuda.is_initialized()
    check('a fit in this process first', one.step > 0 and cuda_used, f"CUDA initialised here: {cuda_used}")
    for i in (1, 2):
        t = time.perf_counter()
        try:
            rank, device, steps, loss = launch(train, 2, f'launch{i}', backend='gloo', timeout=120)
            check(f"launch #{i} after CUDA here", rank == 0 and steps > 0 and device.startswith(DEVICE),
                  f"{device}, {steps} steps, loss {loss}, {time.perf_counter() - t:.1f} s")
        except Exception as e: check(f"launch #{i} after CUDA here", False, f"{type(e).__name__}: {str(e)[:500]}")
    try:
        t = time.perf_counter()
        learn = distribute(make, 2, 'interrupted', backend='gloo', timeout=120)
        start = time.perf_counter() - t
        t = time.perf_counter()
        learn.validate()
        call = time.perf_counter() - t
        learn.fit(3, cbs=[InterruptAt(5)])
        stops = learn.workers.each(lambda l: (l.stop_reason, l.step))
        check('an interrupt stops both processes at the same step', stops[0] == stops[1] and stops[0][0] == 'interrupted',
              str(stops))
        t = time.perf_counter()
        learn.resume()
        step_ms = (time.perf_counter() - t) / (learn.step - stops[0][1]) * 1e3
        times = learn.comm.step_times
        resumed = weights(learn)
        learn.close()
        ref = distribute(make, 2, 'reference', backend='gloo', timeout=120)
        ref.fit(3)
        reference = weights(ref)
        memory = ref.workers.each(lambda l: torch.cuda.max_memory_allocated() // 2**20 if DEVICE == 'cuda' else 0)
        ref.close()
        same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a, b))
        check('resume in the next call: bit-identical to an uninterrupted fit, in both processes',
              same(*resumed) and same(resumed[0], reference[0]) and same(resumed[1], reference[1]),
              f"{learn.step} steps")
        print(f"     start of distribute {start:.1f} s; a call on its live workers (validate) {call * 1e3:.0f} ms; "
              f"{step_ms:.1f} ms/step; last step times: slowest {times[0] * 1e3:.1f} ms (process {times[1]}), fastest "
              f"{times[2] * 1e3:.1f} ms (process {times[3]}); peak GPU memory per process {memory} MB")
    except Exception as e: check('distribute, interrupt, resume', False, f"{type(e).__name__}: {str(e)[:1500]}")
    left = psutil.Process().children(recursive=True)
    check('no process left', not left, str(left))
    sys.exit(1 if failures else 0)


if __name__ == '__main__': main()
