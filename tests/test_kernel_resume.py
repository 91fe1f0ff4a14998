"""In a real Jupyter kernel: interrupt `learn.fit` at a random moment (the kernel's ■ button sends SIGINT to the
kernel's process group), run `learn.resume()` in the next cell, and compare with an uninterrupted fit run in the
same kernel."""
import random
import re
import time
from pathlib import Path

import pytest

jupyter_client = pytest.importorskip('jupyter_client')
from kernel_helpers import Kernel

TESTS = Path(__file__).resolve().parent

SETUP = f"""
import sys, time
sys.path.insert(0, {str(TESTS)!r})
from resume_harness import make_learner, assert_same_run, N_EPOCHS
from trainer_nb.callback.core import Callback

class Slow(Callback):  # ~15 ms a step, so that the fit takes long enough to be interrupted mid-way
    def before_fit(self): print('FIT-STARTED', flush=True)
    def after_batch(self): time.sleep(0.015)
"""


@pytest.mark.slow
@pytest.mark.parametrize('seed', [0, 1])
def test_kernel_interrupt_then_resume_in_next_cell(tmp_path, seed):
    with Kernel(tmp_path) as kernel:
        status, out = kernel.execute(SETUP)
        assert status == 'ok', out
        delay = random.Random(seed).uniform(0.1, 0.5)  # the fit takes ~0.6 s: somewhere in its middle
        interrupted = {'done': False}

        def interrupt_when_started(text):
            if 'FIT-STARTED' in text and not interrupted['done']:
                interrupted['done'] = True
                time.sleep(delay)
                kernel.interrupt()

        status, out = kernel.execute(f"learn = make_learner({str(tmp_path / 'a')!r})\n"
                                     "learn.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[Slow()])\n"
                                     "print('NOT REACHED')", on_output=interrupt_when_started)
        # the interrupt stopped the fit cleanly, then ended the cell as an interrupt (Run All stops there), in one line
        assert status == 'error' and 'stopping after this batch' in out and 'NOT REACHED' not in out, out
        assert re.search(r'^FitInterrupted: the fit stopped cleanly after step \d+, and learn.resume\(\) continues it\. '
                         r'The cell ends as an interrupt, so that Run All goes no further\.$', out, re.M), out
        assert 'Traceback' not in out and out.count('FitInterrupted') == 1, out
        status, out = kernel.execute("print('AFTER', learn.stop_reason, learn.step)")
        assert status == 'ok' and 'AFTER interrupted' in out, out
        status, out = kernel.execute("learn.resume()\nprint('RESUMED', learn.stop_reason, learn.step)")
        assert status == 'ok' and 'RESUMED completed 36' in out, out
        status, out = kernel.execute(f"ref = make_learner({str(tmp_path / 'b')!r})\n"
                                     "ref.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[Slow()])\n"
                                     "assert_same_run(learn, ref)\nprint('IDENTICAL')")
        assert status == 'ok' and 'IDENTICAL' in out, out
