"""Overhead of the Learner against a hand-written PyTorch loop, in one process.

The same tiny MLP (32 -> 64 -> 10, batch 64, AdamW) is trained for 2000 steps, on 1 thread, by:
  - `hand`:    a hand-written loop (forward, loss, backward, step, zero_grad);
  - `default`: a Learner with its default callbacks (Recorder, ProgressCallback, WriterCallback writing
               metrics.json), its console output sent to a file;
  - `default_no_plot`: the same without `LivePlotCallback`, whose one cost outside the loop is the final
               `plot.png` it renders at the end of each fit (about 0.1 s);
  - `default_no_record`: the default without `RunRecord`, whose cost is two writes of `run.json` (and a `git`
               call) a fit, nothing a step: the difference, spread over this fit's steps, is that fixed cost;
  - `quiet`:   a Learner with `progress=False`: the Recorder, `metrics.json` and `SaveOnStop`, no display;
  - `bare`:    a Learner with no callbacks at all;
  - `toolkit`: the default callbacks plus a one-cycle schedule (`fit_one_cycle`), `GradientClip` and
               `TerminateOnNaN`: a typical set of the training toolkit; compared with
  - `hand_toolkit`: the hand-written loop doing the same by hand (torch's OneCycleLR, clip_grad_norm_, a check
               of the loss), so that the ratio shows the toolkit's overhead, not the work it does;
  - `hand_5pct`: the hand loop plus, after each step, pure Python work (attribute reads and writes, as a callback's
               handler does) calibrated at the start of the run to 5% of the hand loop's step, each timed alone: a
               ruler for the run. Where it reads about 1.05x, the run's clock can tell 5%; where it reads far from
               that, the run cannot judge a 1.05x criterion either way (the machine's load moved too much);
  - `loop`:    `learn.loop` with the default callbacks, the body doing by hand what the Learner's step does (forward,
               loss, backward, step, zero_grad, and `loop.log` of the loss, as the Recorder logs it): a loop you
               write, against `hand` and, in the same rounds, against `default` (`fit`).
The variants run interleaved, in a rotating order, for several rounds; we report the median time of each
and the median over rounds of the ratio to `hand` in the same round. Then, separately (tracemalloc slows
things down), the peak Python memory of each variant, and the import time of trainer_nb beyond torch.

With transformers installed, a second table compares, likewise interleaved, on dict batches of padded token ids
(`trainer_nb.testing.token_dls`, batch 32):
  - `hand_bert`:    a hand-written loop over a tiny BERT classifier (2 layers of width 32, built from a config):
                    `loss = model(**batch).loss`, backward, step, zero_grad;
  - `default_bert`: a Learner with its default callbacks and no loss_func, on the same model and batches.

With --trackers, a table of the cost of reporting to a tracker instead (`Learner(report_to=...)`, offline, the stores
in a temporary folder): the default Learner (`default`, writing metrics.json every 20 steps) against itself reporting
to trackio, W&B (offline) and MLflow (a file store), interleaved; and, in each handler of the `ReportCallback`, the
time and the number of Python calls (a count that does not depend on the machine's load): per step in the loop
(`after_batch`, which writes every `log_every` = 20 steps, and `after_validate`), and per fit (`before_fit` opens
the run, `after_fit` writes the rest and closes it).

With --long-runs, the cost of the chapter `callback.long_runs`: the default Learner against itself with `LossSpikes`
(keep_every=20, the default: a copy of model and optimizer every 20 steps, the loss read once a step), interleaved;
the Python calls a step in LossSpikes' handlers (sys.setprofile, load-independent); and the handlers of batch events
that `Preemption` (a default callback) and `fit(time_limit=...)` add: none and one (`TimeLimit.after_batch`).

Run: python bench/overhead.py [--rounds 7] [--steps 2000] [--bert-steps 400]
     python bench/overhead.py --long-runs [--rounds 5] [--steps 2000]
     python bench/overhead.py --final-figure 8   (the final figure's cost alone, first fit and median)
     python bench/overhead.py --trackers [--rounds 5] [--steps 2000]
"""
import argparse
import contextlib
import io
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.callback.tracker import TerminateOnNaN  # noqa: E402
from trainer_nb.callback.training import GradientClip  # noqa: E402
from trainer_nb.learner import Learner  # noqa: E402

BS, N_BATCHES = 64, 100


def make_data():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(BS * N_BATCHES, 32, generator=g)
    y = torch.randint(0, 10, (BS * N_BATCHES,), generator=g)
    return DataLoader(TensorDataset(x, y), batch_size=BS, shuffle=True, generator=torch.Generator().manual_seed(0))


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10))


def hand(dl, steps, out, model=None, opt_func=torch.optim.AdamW, loss_func=nn.functional.cross_entropy,
         each_step=None):
    model = make_model() if model is None else model
    opt = opt_func(model.parameters(), lr=1e-3)
    model.train()
    done = 0
    while done < steps:
        for xb, yb in dl:
            loss = loss_func(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if each_step is not None: each_step()
            done += 1
            if done == steps: break
    return model


class _Handler:
    "What a callback's handler touches: a few attributes of its own and of another object."
    def __init__(self): self.training, self.step, self.every, self.seen = True, 0, 20, 0


_HANDLER = _Handler()


def python_work(calls: int):
    "`calls` times a callback-like handler's Python work (reads, a test, a write): the ruler's load."
    h = _HANDLER
    for _ in range(calls):
        if h.training and h.step % h.every == 0: h.seen += 1
        h.step += 1


RULER = {'calls': 0, 'share': 0.05}  # python_work's calls a step in `hand_5pct`, set by `calibrate_ruler`


def calibrate_ruler(dl, out, share: float = 0.05, repeats: int = 5):
    "Set `hand_5pct`'s load to `share` of the hand loop's step: both timed here, alone (medians of `repeats`)."
    step_s = statistics.median(timed('hand', dl, 400, out) for _ in range(repeats)) / 400
    def unit_s():
        t = time.perf_counter()
        python_work(20000)
        return (time.perf_counter() - t) / 20000
    RULER.update(calls=max(1, round(share * step_s / statistics.median(unit_s() for _ in range(repeats)))), share=share)


def hand_toolkit(dl, steps, out):
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=steps, pct_start=0.25)
    model.train()
    done = 0
    while done < steps:
        for xb, yb in dl:
            loss = nn.functional.cross_entropy(model(xb), yb)
            if not torch.isfinite(loss): return model
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == steps: break
    return model


def run_folder(out) -> str:
    "A run folder of its own for each fit, in `out`, as a user's run has (its metrics.json is not another run's)."
    return tempfile.mkdtemp(dir=out)


def learner(dl, steps, out, default_cbs, toolkit=False, plot=True, progress=True, record=True):
    cbs = [GradientClip(1.0), TerminateOnNaN()] if toolkit else []
    learn = Learner(make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=run_folder(out), device='cpu',
                    default_cbs=default_cbs, cbs=cbs, progress=progress)
    if not plot: learn.remove_cb('live_plot')
    if not record: learn.remove_cb('run_record')
    with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f):
        if toolkit: learn.fit_one_cycle(n_steps=steps, lr_max=1e-3)
        else: learn.fit(n_steps=steps)
    return learn.model


def own_loop(dl, steps, out):
    learn = Learner(make_model(), dl, path=run_folder(out), device='cpu')
    opt = torch.optim.AdamW(learn.model.parameters(), lr=1e-3)
    learn.track(opt=opt)
    model = learn.model
    with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f):
        loop = learn.loop(n_steps=steps)
        for xb, yb in loop:
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loop.log(**{'train/loss': loss})
    return model


VARIANTS = {
    'hand': lambda dl, steps, out: hand(dl, steps, out),
    'default': lambda dl, steps, out: learner(dl, steps, out, True),
    'default_no_plot': lambda dl, steps, out: learner(dl, steps, out, True, plot=False),
    'default_no_record': lambda dl, steps, out: learner(dl, steps, out, True, record=False),
    'quiet': lambda dl, steps, out: learner(dl, steps, out, True, progress=False),
    'bare': lambda dl, steps, out: learner(dl, steps, out, False),
    'toolkit': lambda dl, steps, out: learner(dl, steps, out, True, toolkit=True),
    'hand_toolkit': lambda dl, steps, out: hand_toolkit(dl, steps, out),
    'loop': own_loop,
    'hand_5pct': lambda dl, steps, out: hand(dl, steps, out, each_step=lambda: python_work(RULER['calls'])),
}
BASELINE = {'default': 'hand', 'default_no_plot': 'hand', 'default_no_record': 'hand', 'quiet': 'hand', 'bare': 'hand', 'toolkit': 'hand_toolkit', 'hand': 'hand', 'hand_toolkit': 'hand_toolkit',
            'loop': 'hand', 'hand_5pct': 'hand'}


def make_bert():
    "A tiny BERT classifier, built from a config (no download)."
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=64,
                                                    max_position_embeddings=32, num_labels=2))


def hand_bert(dl, steps, out):
    model = make_bert()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    done = 0
    while done < steps:
        for batch in dl:
            loss = model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == steps: break
    return model


def default_bert(dl, steps, out):
    learn = Learner(make_bert(), dl, lr=1e-3, path=run_folder(out), device='cpu')
    with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f): learn.fit(n_steps=steps)
    return learn.model


def transformers_table(rounds: int, steps: int):
    "The tiny BERT: the default Learner against the hand-written loop, interleaved in rotating order."
    from trainer_nb.testing import token_dls
    dl = token_dls(n_train=512, bs=32).train
    variants = {'hand_bert': hand_bert, 'default_bert': default_bert}
    times = {n: [] for n in variants}
    with tempfile.TemporaryDirectory() as out:
        for fn in variants.values(): fn(dl, 50, out)  # warm-up
        for r in range(rounds):
            for n in (list(variants) if r % 2 == 0 else list(variants)[::-1]):
                t0 = time.perf_counter()
                variants[n](dl, steps, out)
                times[n].append(time.perf_counter() - t0)
    ratios = [d / h for d, h in zip(times['default_bert'], times['hand_bert'])]
    print(f"\ntiny BERT, dict batches: {steps} steps, {rounds} rounds")
    print("| variant | median time (s) | per step (ms) | median ratio to hand_bert |")
    print("|---|---|---|---|")
    for n in variants:
        ratio = statistics.median(ratios) if n == 'default_bert' else 1.
        print(f"| {n} | {statistics.median(times[n]):.3f} | {statistics.median(times[n]) / steps * 1000:.2f} | "
              f"{ratio:.3f}x |")


def timed(name, dl, steps, out):
    t0 = time.perf_counter()
    VARIANTS[name](dl, steps, out)
    return time.perf_counter() - t0


def peak_memory(name, dl, steps, out):
    tracemalloc.start()
    VARIANTS[name](dl, steps, out)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def import_time(repeats=5):
    code = ("import time; t0 = time.perf_counter(); import torch; t1 = time.perf_counter(); "
            "import trainer_nb.all; t2 = time.perf_counter(); print(t1 - t0, t2 - t1)")
    root = Path(__file__).resolve().parent.parent
    runs = [tuple(map(float, subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                                            check=True, cwd=root).stdout.split())) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def final_figure(dl, fits):
    "The seconds the live plot's final figure (`plot.png`, headless) takes: first fit, then the median of `fits`."
    for name in ('default', 'toolkit'):
        seconds = []
        for _ in range(fits + 1):
            with tempfile.TemporaryDirectory() as out:
                learn = Learner(make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=out, device='cpu')
                with contextlib.redirect_stdout(io.StringIO()):
                    if name == 'toolkit': learn.fit_one_cycle(n_steps=300, lr_max=1e-3)
                    else: learn.fit(n_steps=300)
                seconds.append(learn.live_plot.stats['final'])
        print(f"final figure, {name}: first fit {seconds[0] * 1000:.0f} ms, then median "
              f"{statistics.median(seconds[1:]) * 1000:.1f} ms over {fits} fits")


def run_record_cost(dl, out, fits=20):
    "What `RunRecord` costs: milliseconds a fit (its two writes of run.json), and its handlers of per-batch events."
    learn = Learner(make_model(), dl, nn.functional.cross_entropy, path=out, device='cpu', progress=False)
    record, seconds = learn.run_record, []
    for _ in range(fits):
        t = time.perf_counter()
        record.before_fit()
        record.after_fit()
        seconds.append(time.perf_counter() - t)
    batch_events = [e for e in record.handlers() if 'batch' in e or e.endswith(('pred', 'loss', 'backward', 'step'))]
    return statistics.median(seconds), batch_events


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--rounds', type=int, default=7)
    parser.add_argument('--steps', type=int, default=2000)
    parser.add_argument('--bert-steps', type=int, default=400, help="steps of the tiny BERT (with transformers; 0: none)")
    parser.add_argument('--final-figure', type=int, metavar='FITS',
                        help="only time the live plot's final figure over this many 300-step fits")
    parser.add_argument('--trackers', action='store_true', help="only the cost of reporting to trackers (offline)")
    parser.add_argument('--long-runs', action='store_true', help="only the cost of LossSpikes, Preemption, TimeLimit")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dl = make_data()
    if args.final_figure: return final_figure(dl, args.final_figure)
    if args.trackers: return tracker_table(dl, args.rounds, args.steps)
    if args.long_runs: return long_runs_table(dl, args.rounds, args.steps)
    names = list(VARIANTS)
    times = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as out:
        for n in names: timed(n, dl, 200, out)  # warm-up
        calibrate_ruler(dl, out)
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for n in order: times[n].append(timed(n, dl, args.steps, out))
        memory = {n: peak_memory(n, dl, args.steps, out) for n in names}
    torch_s, ours_s = import_time()
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, {args.steps} steps, "
          f"{args.rounds} rounds, 1 thread")
    print("| variant | median time (s) | compared with | median ratio | peak Python memory (MiB) |")
    print("|---|---|---|---|---|")
    for n in names:
        base = BASELINE[n]
        ratios = [t / h for t, h in zip(times[n], times[base])]
        print(f"| {n} | {statistics.median(times[n]):.3f} | {base} | {statistics.median(ratios):.3f}x | "
              f"{memory[n] / 2**20:.2f} |")
    print(f"\nhand_5pct: the hand loop plus {RULER['calls']} calls a step of pure Python work, calibrated to "
          f"{RULER['share']:.0%} of its step: this run's ruler (about {1 + RULER['share']:.2f}x where the clock can tell "
          f"{RULER['share']:.0%})")
    loop_vs_fit = statistics.median(t / d for t, d in zip(times['loop'], times['default']))
    print(f"\nloop against default (fit), in the same rounds: {loop_vs_fit:.3f}x")
    print(f"\nimport torch: {torch_s:.3f} s; import trainer_nb.all after torch: {ours_s * 1000:.1f} ms")
    with tempfile.TemporaryDirectory() as out: per_fit, batch_events = run_record_cost(dl, out)
    print(f"RunRecord: {per_fit * 1000:.1f} ms a fit (before_fit and after_fit back to back: run.json written twice, "
          f"and git asked at the start, waited for), "
          f"{per_fit / args.steps * 1e6:.1f} us a step of a {args.steps}-step fit at most; handlers of batch events: "
          f"{batch_events or 'none'}")
    if not args.bert_steps: return
    try: import transformers  # noqa: F401
    except ImportError: return print("\n(transformers is not installed: no tiny BERT table; pip install -e '.[dev]')")
    transformers_table(args.rounds, args.bert_steps)


# ---- the cost of reporting to a tracker (--trackers)

TRACKERS = ('trackio', 'wandb', 'mlflow')


def offline_trackers(root: Path):
    "Send every tracker to `root`, offline and without telemetry (before any of them is imported)."
    import os
    os.environ.update(TRACKIO_DIR=str(root / 'trackio'), WANDB_MODE='offline', WANDB_DIR=str(root), WANDB_SILENT='true',
                      WANDB_CACHE_DIR=str(root / 'wandb-cache'), WANDB_CONFIG_DIR=str(root / 'wandb-config'),
                      MLFLOW_ALLOW_FILE_STORE='true', MLFLOW_DISABLE_TELEMETRY='true', HF_HUB_OFFLINE='1',
                      HF_HUB_DISABLE_TELEMETRY='1', DO_NOT_TRACK='1')


def tracker_writer(name: str, root: Path):
    from trainer_nb.trackers import MLflowWriter, TrackioWriter, WandbWriter
    if name == 'trackio': return TrackioWriter(project='bench')
    if name == 'wandb':
        import wandb
        return WandbWriter(project='bench', settings=wandb.Settings(console='off', x_disable_stats=True,
                           x_disable_machine_info=True, disable_git=True, disable_code=True))
    return MLflowWriter(project='bench', tracking_uri=(root / 'mlruns').as_uri())


def counted_call(handler, spent: dict, key: str):
    "Call `handler()`, adding its seconds and its Python calls (counted with sys.setprofile) to `spent[key]`."
    calls = [0]
    def count(frame, what, arg):
        if what in ('call', 'c_call'): calls[0] += 1
    t = time.perf_counter()
    sys.setprofile(count)
    try: handler()
    finally:
        sys.setprofile(None)
        seconds, n = spent.get(key, (0., 0))
        spent[key] = (seconds + time.perf_counter() - t, n + calls[0])


def timed_report(writer):
    "A `ReportCallback` that adds up the seconds and the Python calls of each of its handlers."
    from trainer_nb.trackers import ReportCallback

    class TimedReport(ReportCallback):
        spent = {}

        def _timed(self, event, handler): counted_call(handler, self.spent, event)

        def before_fit(self): self._timed('before_fit', super().before_fit)
        def after_batch(self): self._timed('after_batch', super().after_batch)
        def after_validate(self): self._timed('after_validate', super().after_validate)
        def after_fit(self): self._timed('after_fit', super().after_fit)

    return TimedReport([writer])


def tracker_fit(dl, steps, out, tracker=None, root=None, timed=False):
    "The default Learner, reporting to `tracker` (None: not), for `steps` steps; its `ReportCallback`."
    report = None
    if tracker is not None:
        writer = tracker_writer(tracker, root)
        report = timed_report(writer) if timed else None
    learn = Learner(make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=out, device='cpu',
                    cbs=[report] if report else [], report_to=writer if tracker and not timed else None)
    with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        learn.fit(n_steps=steps)
    return report


def ratio_table(times: dict, steps: int, rounds: int):
    "Print each variant's median fit time, and its median ratio and cost a step against `times['default']`, round by round."
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, {steps} steps, {rounds} rounds, 1 thread")
    print("| variant | median time (s) | median ratio to default | cost a step (us, median over rounds) |")
    print("|---|---|---|---|")
    for n, ts in times.items():
        ratios = [t / d for t, d in zip(ts, times['default'])]
        extra = [(t - d) / steps * 1e6 for t, d in zip(ts, times['default'])]
        print(f"| {n} | {statistics.median(ts):.3f} | {statistics.median(ratios):.3f}x | {statistics.median(extra):.1f} |")


def tracker_table(dl, rounds: int, steps: int):
    "The default Learner against itself reporting to each tracker, interleaved; then where the time goes."
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        offline_trackers(root)
        names = ['default', *TRACKERS]
        times = {n: [] for n in names}
        def one(n, k):
            out = root / f'run-{n}-{k}'
            out.mkdir()
            t = time.perf_counter()
            tracker_fit(dl, steps, out, None if n == 'default' else n, root)
            return time.perf_counter() - t
        for n in names: one(n, 'warm')  # warm-up: imports, the W&B service
        for r in range(rounds):
            for n in names[r % len(names):] + names[:r % len(names)]: times[n].append(one(n, r))
        ratio_table(times, steps, rounds)
        print("\nIn the ReportCallback's handlers (one timed fit each; the calls are counted with sys.setprofile, "
              "which slows them: the seconds are an upper bound):")
        print("| tracker | per step: us | per step: Python calls | per fit: before_fit (s) | per fit: after_fit (s) |")
        print("|---|---|---|---|---|")
        for n in TRACKERS:
            out = root / f'timed-{n}'
            out.mkdir()
            spent = tracker_fit(dl, steps, out, n, root, timed=True).spent
            loop_s = sum(spent.get(e, (0, 0))[0] for e in ('after_batch', 'after_validate'))
            loop_calls = sum(spent.get(e, (0, 0))[1] for e in ('after_batch', 'after_validate'))
            print(f"| {n} | {loop_s / steps * 1e6:.1f} | {loop_calls / steps:.1f} | {spent['before_fit'][0]:.3f} | "
                  f"{spent['after_fit'][0]:.3f} |")




# ---- the cost of the long-runs callbacks (--long-runs)

def counted(cb, events):
    "Wrap `cb`'s handlers of `events` to add up their seconds and Python calls (sys.setprofile) into `cb.spent`."
    cb.spent = {}
    for event in events:
        setattr(cb, event, lambda handler=getattr(cb, event), event=event: counted_call(handler, cb.spent, event))
    return cb


def long_runs_fit(dl, steps, out, spikes=False, time_limit=None, count=False):
    from trainer_nb.callback.long_runs import LossSpikes
    cbs = [LossSpikes()] if spikes else []
    if count: cbs = [counted(cbs[0], ('after_loss', 'after_step'))]
    learn = Learner(make_model(), dl, nn.functional.cross_entropy, lr=1e-3, path=out, device='cpu', cbs=cbs)
    with open(Path(out) / 'stdout.txt', 'a') as f, contextlib.redirect_stdout(f):
        learn.fit(n_steps=steps, time_limit=time_limit)
    return learn


def batch_handlers(learn, names):
    "The handlers of batch events among the callbacks `names` of `learn` (after its fit: the tables of the last fit)."
    events = ('before_batch', 'after_pred', 'after_loss', 'before_backward', 'after_backward', 'before_step',
              'after_step', 'after_batch')
    return [f"{type(cb).__name__}.{e}" for e in events for cb, _ in learn.callbacks.tables[True][e] if cb.name in names]


def long_runs_table(dl, rounds: int, steps: int):
    "The default Learner against itself with LossSpikes, interleaved; Python calls a step; handlers added a step."
    names = ['default', 'loss_spikes']
    times = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        def one(n, k):
            out = Path(tmp) / f'run-{n}-{k}'
            out.mkdir()
            t = time.perf_counter()
            long_runs_fit(dl, steps, out, spikes=n == 'loss_spikes')
            return time.perf_counter() - t
        for n in names: one(n, 'warm')
        for r in range(rounds):
            for n in names[r % 2:] + names[:r % 2]: times[n].append(one(n, r))
        ratio_table(times, steps, rounds)
        (Path(tmp) / 'counted').mkdir()
        spent = long_runs_fit(dl, steps, Path(tmp) / 'counted', spikes=True, count=True).loss_spikes.spent
        for event, (seconds, calls) in spent.items():
            print(f"LossSpikes.{event}: {calls / steps:.1f} Python calls a step, {seconds / steps * 1e6:.1f} us a step "
                  "(counted: slowed by the profiler)")
        from trainer_nb.callback.long_runs import Preemption, TimeLimit
        (Path(tmp) / 'plain').mkdir()
        plain = long_runs_fit(dl, 50, Path(tmp) / 'plain')
        print(f"events Preemption (a default callback) handles: {sorted(Preemption().handlers())}; handlers of batch "
              f"events in a default fit from Preemption: {batch_handlers(plain, ['preemption']) or 'none'}; "
              f"TimeLimit (only in a fit(time_limit=...)) handles: {sorted(TimeLimit(3600).handlers())}")


if __name__ == '__main__': main()
