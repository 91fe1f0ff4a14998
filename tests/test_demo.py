"""The README's first command: the digits demo, run as a user runs it, in a terminal."""
import json
import subprocess
import sys

import torch


def test_digits_demo_reaches_95_percent(tmp_path):
    run = tmp_path / 'run'
    proc = subprocess.run([sys.executable, '-m', 'trainer_nb.demo', '--path', str(run)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.replace('\r', '\n')
    # the epoch table, one row per epoch
    assert 'epoch' in out and 'train_loss' in out and 'valid_loss' in out and 'accuracy' in out
    rows = [l.split() for l in out.splitlines() if l.split() and l.split()[0].isdigit()]
    assert [r[0] for r in rows] == [str(i) for i in range(20)]
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
