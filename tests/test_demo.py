"""The README's first command: the digits demo, run as a user runs it, in a terminal, its output piped.
Then Ctrl+C (a real SIGINT) and `--resume`, which must end with the weights of a run never interrupted."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


def demo_env() -> dict:
    "The environment of a demo process: this checkout's trainer_nb first."
    return {**os.environ, 'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')])}


def run_demo(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, '-m', 'trainer_nb.demo', *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=demo_env())


def epoch_rows(out: str) -> list[list[str]]:
    "The rows of the epoch table: the lines that start with a number."
    return [l.split() for l in out.replace('\r', '\n').splitlines() if l.split() and l.split()[0].isdigit()]


def model_weights(run: Path, name: str) -> dict:
    return torch.load(run / 'checkpoints' / f'{name}.pt', weights_only=True)['model']


@pytest.fixture(scope='module')
def uninterrupted(tmp_path_factory):
    "The demo's default run (20 epochs), never interrupted: its run folder and process."
    tmp = tmp_path_factory.mktemp('uninterrupted')
    return tmp / 'run', run_demo('--path', str(tmp / 'run'), cwd=tmp)


def test_digits_demo_reaches_95_percent(uninterrupted):
    run, proc = uninterrupted
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.replace('\r', '\n')
    # the epoch table, one row per epoch
    assert 'epoch' in out and 'train_loss' in out and 'valid_loss' in out and 'accuracy' in out
    rows = epoch_rows(out)
    assert [r[0] for r in rows] == [str(i) for i in range(1, 21)]
    # metrics.json: one line per write, the last validation above 0.95
    records = [json.loads(l) for l in (run / 'metrics.json').read_text().splitlines()]
    accuracies = [r['valid/accuracy'] for r in records if 'valid/accuracy' in r]
    assert len(accuracies) == 20
    assert accuracies[-1] >= 0.95, accuracies
    # the final checkpoint loads safely and holds the whole state
    state = torch.load(run / 'checkpoints' / 'final.pt', weights_only=True)
    assert state['fit_state']['stop_reason'] == 'completed'
    assert state['fit_state']['step'] == 20 * 23
    assert 'valid/accuracy' in state['storage']['histories']


def test_piped_output_is_clean_lines(uninterrupted):
    run, proc = uninterrupted
    assert '\r' not in proc.stdout and '\x1b' not in proc.stdout, proc.stdout[:500]
    assert '█' not in proc.stdout and '|---' not in proc.stdout  # no bar, not even one drawn once
    lines = proc.stdout.splitlines()
    assert lines[1].split() == ['epoch', 'train_loss', 'valid_loss', 'accuracy', 'time']
    assert len(lines) == 1 + 1 + 20 + 4, lines  # the run's line, the header, 20 rows, the summary (4 lines)
    assert lines[-1] == f"plot: {run / 'plot.png'}"
    assert (run / 'plot.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_ctrl_c_then_resume_ends_with_the_same_weights(uninterrupted, tmp_path):
    reference, _ = uninterrupted
    run = tmp_path / 'run'
    proc = subprocess.Popen([sys.executable, '-m', 'trainer_nb.demo', '--path', str(run)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=demo_env())
    seen = []
    for line in proc.stdout:  # the demo flushes each line: the first row comes when the first epoch ends
        seen.append(line)
        if line.split()[:1] == ['1']:
            proc.send_signal(signal.SIGINT)  # Ctrl+C, once, early in the second epoch (19 epochs to go)
            break
    rest, err = proc.communicate(timeout=300)
    out = ''.join(seen) + rest
    assert proc.returncode == 130, (out, err)
    assert '\r' not in out and '\x1b' not in out, out
    command = f"python -m trainer_nb.demo --path {run} --resume"
    # the messages name what continues the run here: the command, not learn.resume()
    assert f"(interrupted); {command} continues it" in out and 'learn.resume()' not in out + err, (out, err)
    assert f"Then {command} continues the fit." in out, out
    assert f"to continue: {command}" in out.splitlines(), out
    # as the bar counts (or, if it came before the second epoch's first batch, between the two epochs)
    assert re.search(r"stopped at (epoch 2/20, batch \d+/23|the end of epoch 1/20), step \d+ \(interrupted\)", out), out
    stopped = torch.load(run / 'checkpoints' / 'last.pt', weights_only=True)['fit_state']
    assert stopped['stop_reason'] == 'interrupted' and 0 < stopped['step'] < 20 * 23, stopped
    assert not (run / 'checkpoints' / 'final.pt').exists()

    resumed = run_demo('--path', str(run), '--resume', cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert '\r' not in resumed.stdout and '\x1b' not in resumed.stdout
    # the two processes print the table together: each epoch once (the stopped epoch's row after the resume)
    assert [r[0] for r in epoch_rows(out) + epoch_rows(resumed.stdout)] == [str(i) for i in range(1, 21)]
    final, expected = model_weights(run, 'final'), model_weights(reference, 'final')
    assert list(final) == list(expected)
    where = [l for l in out.splitlines() if 'stopped at' in l]  # (said if it fails: where the stop was, and its state)
    assert [k for k in final if not torch.equal(final[k], expected[k])] == [], (where, stopped, resumed.stdout[-600:])  # bit for bit
    state = torch.load(run / 'checkpoints' / 'final.pt', weights_only=True)['fit_state']
    assert (state['stop_reason'], state['step']) == ('completed', 20 * 23)


def test_resume_without_checkpoint_says_so(tmp_path):
    proc = run_demo('--path', str(tmp_path / 'run'), '--resume', cwd=tmp_path)
    assert proc.returncode == 1
    assert 'nothing to resume' in proc.stderr and 'last.pt does not exist' in proc.stderr, proc.stderr


def test_ctrl_c_before_training_exits_quietly(tmp_path):
    "Ctrl+C while torch is still importing (or the data loading): one line on stderr, no traceback, exit 130."
    proc = subprocess.Popen([sys.executable, '-m', 'trainer_nb.demo', '--path', str(tmp_path / 'run')],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=demo_env())
    import time
    time.sleep(1.0)  # (importing torch, then scikit-learn and the data, take longer than this)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert err.strip() == 'trainer_nb.demo: interrupted before training started; nothing was saved.', err
    assert 'Traceback' not in err and 'Training an MLP' not in out, (out, err)
