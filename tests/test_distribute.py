"""Several processes from a notebook: `launch` and `distribute` in a real Jupyter kernel (gloo on the CPU). Process 0
is the kernel; processes 1.. are fresh interpreters that it starts."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch

from kernel_helpers import Kernel

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason='torch.distributed is not available')

NO_CHILD = "import psutil; print('children:', psutil.Process().children(recursive=True))"


def run_ok(k, code, timeout=180):
    status, out = k.execute(code, timeout=timeout)
    assert status == 'ok', out
    return out


def test_launch_three_times_in_one_kernel_with_notebook_code_and_after_cuda(tmp_path):
    "A function and a model defined in the notebook, `launch`ed 3 times, then once more in a kernel that looks as if it "
    "had used CUDA (the start never asks CUDA, and spawns): each result right, no process left."
    with Kernel(tmp_path) as k:
        run_ok(k, """
import os, torch, torch.distributed as dist
from torch import nn
from trainer_nb.distributed import launch

class Scale(nn.Module):  # defined in the notebook: cloudpickle sends it by value
    def __init__(self, k): super().__init__(); self.w = nn.Parameter(torch.full((3,), float(k)))
    def forward(self, x): return x * self.w

def work(k):
    t = Scale(k)(torch.full((3,), float(int(os.environ['RANK']) + 1)))  # process r: (r+1)*k
    dist.all_reduce(t)
    return t.tolist(), dist.get_world_size()
""")
        for k_ in (1, 2, 3):
            assert f"{([3. * k_] * 3, 2)}" in run_ok(k, f"print(launch(work, 2, {k_}))")
            assert 'children: []' in run_ok(k, NO_CHILD)
        out = run_ok(k, """
def refuse(*a, **kw): raise AssertionError('torch.cuda.is_available() was called before the start')
torch.cuda.is_initialized, torch.cuda.is_available = (lambda: True), refuse  # as after a fit on the GPU
print(launch(work, 2, 4))
""")
        assert str(([12.] * 3, 2)) in out
        assert 'children: []' in run_ok(k, NO_CHILD)
        # an interrupt while the processes run a function that is no fit: KeyboardInterrupt here, the others ended
        run_ok(k, "import time\ndef sleepy(): print('sleeping', flush=True); time.sleep(60)")
        status, out = execute_and(k, "launch(sleepy, 2)", k.interrupt, when='sleeping')
        assert status == 'error' and 'KeyboardInterrupt' in out, out
        assert 'children: []' in run_ok(k, NO_CHILD)
        out = run_ok(k, "import threading\nlock = threading.Lock()\ntry: launch(lambda: lock, 2)\n"
                        "except TypeError as e: print(e)")
        assert 'cannot pickle' in out and 'inside the function' in out, out


SETUP = """
import time, torch, psutil
from trainer_nb.distributed import distribute
from trainer_nb.testing import synth_learner
from trainer_nb.callback.core import Callback

class Slow(Callback):  # (a fit long enough to interrupt; process 0 says where it is)
    def after_step(self):
        time.sleep(0.03)
        if self.learn.rank == 0 and self.learn.step == 5: print('at step 5', flush=True)

def make():
    torch.manual_seed(0)
    return synth_learner(n_train=512, bs=16, progress=False)

weights = lambda learn: learn.workers.each(lambda l: [p.detach().clone() for p in l.model.parameters()])
"""


def execute_and(k, code, action, when='at step 5', timeout=180):
    "Run `code`; call `action()` once when its output shows `when`."
    done = []
    def on_output(text):
        if when in text and not done: done.append(action())
    status, out = k.execute(code, timeout=timeout, on_output=on_output)
    assert done, out
    return status, out


def test_distribute_interrupt_then_resume_in_the_next_cell_is_bit_identical(tmp_path):
    with Kernel(tmp_path) as k:
        run_ok(k, SETUP)
        run_ok(k, "learn = distribute(make, 2)")
        status, out = execute_and(k, "learn.fit(3, cbs=[Slow()])", k.interrupt)
        # the interrupt is a stop at a batch boundary, in every process; the cell ends as an interrupt (Run All stops),
        # and the other processes wait for the next call
        assert status == 'error' and 'FitInterrupted: the fit stopped cleanly after step' in out, out
        out = run_ok(k, "print(learn.workers.each(lambda l: (l.stop_reason, l.step)))")
        stops = eval(out.strip())
        assert stops[0] == stops[1] and stops[0][0] == 'interrupted' and 5 <= stops[0][1] < 48, out
        run_ok(k, "learn.resume(); resumed = weights(learn); print(learn.step); learn.close()")
        run_ok(k, "ref = distribute(make, 2); ref.fit(3, cbs=[Slow()]); reference = weights(ref); ref.close()")
        out = run_ok(k, """
same = lambda a, b: all(torch.equal(x, y) for x, y in zip(a, b))
print('ranks agree:', same(*resumed), '| as uninterrupted:', same(resumed[0], reference[0]), same(resumed[1], reference[1]))
print('steps', learn.step, ref.step)
""")
        assert 'ranks agree: True | as uninterrupted: True True' in out and 'steps 48 48' in out, out
        out = run_ok(k, "try: learn.fit(1)\nexcept RuntimeError as e: print(e)")
        assert 'have ended (closed with learn.close())' in out and 'distribute(make, 2)' in out
        assert 'children: []' in run_ok(k, NO_CHILD)


def test_launch_interrupted_in_a_kernel_goes_on_in_every_process(tmp_path):
    """■ during a fit inside `launch`: every process stops the fit at the same boundary and goes on with the function,
    a collective after the fit included. Process 0's fit does not end the cell as an interrupt (the others would wait
    for it at that collective): the call returns, as it would outside a kernel."""
    with Kernel(tmp_path) as k:
        run_ok(k, SETUP)
        run_ok(k, """
from trainer_nb.distributed import DistributedTrainer, launch
def train():
    torch.manual_seed(0)
    learn = synth_learner(n_train=512, bs=16, progress=False, cbs=[DistributedTrainer()])
    learn.fit(3, cbs=[Slow()])
    learn.validate()  # (a collective: every process must reach it)
    return learn.stop_reason, learn.step
""")
        status, out = execute_and(k, "print('RESULT', launch(train, 2, timeout=30))", k.interrupt)
        assert status == 'ok' and "RESULT ('interrupted', " in out and 'FitInterrupted' not in out, out
        assert 'children: []' in run_ok(k, NO_CHILD)


def test_a_worker_killed_mid_fit_is_named_and_distribute_works_again(tmp_path):
    with Kernel(tmp_path) as k:
        run_ok(k, SETUP)
        pid = int(run_ok(k, "learn = distribute(make, 2, timeout=20); print(learn.workers.procs[0].pid)").strip())
        t0 = []
        def kill():
            t0.append(time.time())
            os.kill(pid, signal.SIGKILL)
        status, out = execute_and(k, "learn.fit(3, cbs=[Slow()])", kill)
        assert status == 'error' and time.time() - t0[0] < 20, out
        assert 'Process 1 of the distributed run died' in out and 'SIGKILL' in out and 'distribute(make, 2)' in out, out
        assert 'children: []' in run_ok(k, NO_CHILD)
        out = run_ok(k, "learn = distribute(make, 2); learn.fit(1); print('steps', learn.workers.each(lambda l: l.step))")
        assert 'steps [16, 16]' in out, out
        pid = int(run_ok(k, "print(learn.workers.procs[0].pid)").strip())
    # the kernel killed (no atexit): its workers see their parent gone and end within a second or so
    deadline = time.time() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_worker_that_raises_or_hangs_is_named(tmp_path):
    with Kernel(tmp_path) as k:
        run_ok(k, SETUP + """
class Fail(Callback):
    def after_step(self):
        if self.learn.rank == 1 and self.learn.step == 3: raise ValueError('process 1 fails at step 3')
class Hang(Callback):
    def after_step(self):
        if self.learn.rank == 1 and self.learn.step == 3: time.sleep(600)
""")
        run_ok(k, "learn = distribute(make, 2, timeout=5)")
        status, out = k.execute("learn.load('missing')")  # the same error in every process: the workers stay
        assert status == 'error' and 'FileNotFoundError' in out and 'wait for the next call' in out, out
        status, out = k.execute("learn.fit(1, cbs=[Fail()])")
        assert status == 'error' and 'Process 1 of the distributed run failed' in out, out
        assert 'process 1 fails at step 3' in out and 'distribute(make, 2)' in out, out
        run_ok(k, "learn = distribute(make, 2, timeout=5)")
        t0 = time.time()
        status, out = k.execute("learn.fit(1, cbs=[Hang()])")
        assert status == 'error' and 'Process 1 of the distributed run did not answer' in out, out
        assert time.time() - t0 < 5 + 10, out  # (the timeout, the grace, the end)
        assert 'children: []' in run_ok(k, NO_CHILD)


def test_launch_leaves_the_excepthook_as_it_was(tmp_path):
    "torch's init_process_group wraps sys.excepthook to prefix '[rank0]: ', once more at each group: a script that "
    "launches twice, then fails, prints its traceback once, without the prefixes of groups that have ended."
    script = tmp_path / 'twice.py'
    script.write_text("import sys, torch.distributed as dist\n"
                      "from trainer_nb.launch import launch\n"
                      "def work(): return dist.get_rank()\n"
                      "if __name__ == '__main__':\n"
                      "    hook = sys.excepthook\n"
                      "    print(launch(work, 2), launch(work, 2), sys.excepthook is hook, flush=True)\n"
                      "    raise ValueError('the script fails later')\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 1 and run.stdout.strip() == '0 0 True', (run.stdout, run.stderr)
    assert 'ValueError: the script fails later' in run.stderr and '[rank0]' not in run.stderr, run.stderr
