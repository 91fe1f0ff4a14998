"""In a real Jupyter kernel: interrupt `learn.fit` at a random moment (the kernel's ■ button sends SIGINT to the
kernel's process group), run `learn.resume()` in the next cell, and compare with an uninterrupted fit run in the
same kernel."""
import queue
import random
import time
from pathlib import Path

import pytest

jupyter_client = pytest.importorskip('jupyter_client')

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


def run_cell(kc, code, timeout=120, on_output=None):
    "Execute `code`; return (status, stdout text)."
    msg_id = kc.execute(code)
    out, deadline = [], time.time() + timeout
    while True:
        msg = kc.get_iopub_msg(timeout=max(deadline - time.time(), 0.1))
        if msg['parent_header'].get('msg_id') != msg_id: continue
        if msg['msg_type'] == 'stream':
            out.append(msg['content']['text'])
            if on_output: on_output(''.join(out))
        elif msg['msg_type'] == 'error': out.append('\n'.join(msg['content']['traceback']))
        elif msg['msg_type'] == 'status' and msg['content']['execution_state'] == 'idle': break
    reply = kc.get_shell_msg(timeout=timeout)
    return reply['content']['status'], ''.join(out)


@pytest.mark.slow
@pytest.mark.parametrize('seed', [0, 1])
def test_kernel_interrupt_then_resume_in_next_cell(tmp_path, seed):
    km = jupyter_client.KernelManager(kernel_name='python3')
    km.start_kernel(cwd=str(tmp_path))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=60)
        status, out = run_cell(kc, SETUP)
        assert status == 'ok', out
        delay = random.Random(seed).uniform(0.1, 0.5)  # the fit takes ~0.6 s: somewhere in its middle
        interrupted = {'done': False}

        def interrupt_when_started(text):
            if 'FIT-STARTED' in text and not interrupted['done']:
                interrupted['done'] = True
                time.sleep(delay)
                km.interrupt_kernel()

        status, out = run_cell(kc, f"learn = make_learner({str(tmp_path / 'a')!r})\n"
                                   "learn.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[Slow()])\n"
                                   "print('AFTER', learn.stop_reason, learn.step)", on_output=interrupt_when_started)
        assert status == 'ok', out  # the interrupt stopped the fit cleanly: no KeyboardInterrupt in the cell
        assert 'stopping after this batch' in out and 'AFTER interrupted' in out, out
        status, out = run_cell(kc, "learn.resume()\nprint('RESUMED', learn.stop_reason, learn.step)")
        assert status == 'ok' and 'RESUMED completed 36' in out, out
        status, out = run_cell(kc, f"ref = make_learner({str(tmp_path / 'b')!r})\n"
                                   "ref.fit_one_cycle(N_EPOCHS, 1e-2, cbs=[Slow()])\n"
                                   "assert_same_run(learn, ref)\nprint('IDENTICAL')")
        assert status == 'ok' and 'IDENTICAL' in out, out
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
