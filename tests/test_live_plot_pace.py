"""The live plot keeps pace, in a real kernel (issue 40).

The README's digits fit (30 epochs, 690 steps), slowed to about 20 s, runs as a cell in a kernel that jupyter_client
drives as a frontend does. Every plot image the kernel sends (display_data, then update_display_data) is read with
the time it came. The picture must change at least every 2.5 s from its first frame to the end of the fit, and each
frame must show all the data it was drawn from: the limits of each panel's axes (which the drawing process reports
with each frame, kept in `learn.live_plot.frame_log` with the PNG's hash) hold the bounds of the panel's data, and
once the first validation has run, the frames have the metrics panel.
"""
import base64
import hashlib
import json
import time

import pytest

pytest.importorskip('jupyter_client')
from kernel_helpers import Kernel

SETUP = '''
import json, time, torch
from trainer_nb.learner import Learner
from trainer_nb.callback.core import LambdaCallback
from trainer_nb.demo import digits_dls, digits_model
from trainer_nb.metrics import accuracy
torch.manual_seed(0)
learn = Learner(digits_model(), digits_dls(), torch.nn.functional.cross_entropy, lr=1e-2, metrics=[accuracy],
                path='run')
slow = LambdaCallback(before_batch=lambda l: l.training and time.sleep(0.02))  # (about 20 s in all)
'''
FIT = "learn.fit(30, cbs=[slow])"
REPORT = ("lp = learn.live_plot\n"
          "print('REPORT ' + json.dumps({'log': lp.frame_log, 'stats': lp.stats, 'step': learn.step, "
          "'layout': lp.plot.data.layout}))")
STEPS_PER_EPOCH = 23  # 1438 training images in batches of 64


def holds(limits, bounds, log):
    "Whether axes of `limits` [x0, x1, y0, y1] show all of a panel's data (`bounds`: x0, x1, y0, y1, smallest y > 0; None: none yet)."
    if bounds is None: return True  # (the metrics panel before the first validation: nothing to hold)
    x0, x1, y0, y1 = limits
    return x0 <= bounds[0] and bounds[1] <= x1 and y0 <= (bounds[4] if log else bounds[2]) and bounds[3] <= y1


@pytest.mark.slow
def test_the_live_plot_changes_every_few_seconds_and_its_axes_hold_the_data(tmp_path):
    images = []  # (time received, sha1 of the PNG) of each plot image, in order
    def on_message(msg):
        if msg['msg_type'] in ('display_data', 'update_display_data') and 'image/png' in msg['content']['data']:
            png = base64.b64decode(msg['content']['data']['image/png'])
            images.append((time.time(), hashlib.sha1(png).hexdigest()))

    with Kernel(tmp_path) as k:
        k.run(SETUP, timeout=120)
        t0 = time.time()
        _, _, t_end = k.collect(k.kc.execute(FIT), timeout=180, on_message=on_message)
        out, _ = k.run(REPORT)
    report = json.loads(next(l for l in out.splitlines() if l.startswith('REPORT '))[7:])
    log, stats = report['log'], report['stats']
    assert report['step'] == 30 * STEPS_PER_EPOCH
    assert t_end - t0 > 12, t_end - t0  # (a fit long enough to tell)

    # the picture changes at least every 2.5 s, from its first frame to the end of the fit
    changes = [t for i, (t, sha) in enumerate(images) if i == 0 or sha != images[i - 1][1]]
    gaps = [b - a for a, b in zip(changes, changes[1:] + [t_end])]
    assert len(changes) >= 8 and max(gaps) <= 2.5, ([round(t - t0, 2) for t in changes], round(t_end - t0, 2))

    # the live frames are the drawing process's (the last image is the final figure, drawn in the kernel)
    assert stats['in_process'] == len(log) == len(images) - 1, (stats, len(images))
    assert [sha for _, sha in images[:-1]] == [f['sha1'] for f in log]
    layout = report['layout']
    for f in log:
        # each panel's axes hold all of its data: a falling loss stays in view
        assert len(f['limits']) == len(f['bounds']) == len(f['log_y']), f
        for limits, bounds, log_y in zip(f['limits'], f['bounds'], f['log_y']): assert holds(limits, bounds, log_y), f
        # once the first validation has run, the frames have its panel (the metrics)
        if f['step'] > STEPS_PER_EPOCH: assert len(f['limits']) == len(layout), (f, layout)
    # the last live frame shows the fit's last seconds
    assert log[-1]['step'] > 30 * STEPS_PER_EPOCH * 0.8, log[-1]
