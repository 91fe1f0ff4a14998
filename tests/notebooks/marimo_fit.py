# The marimo notebook that tests/test_browser_marimo.py runs in `marimo edit` and `marimo run` (headless Chromium).
# It trains the digits MLP with the default live view (panel's status line, progress bars and table, live plot),
# then reports how the fit ended (a cell that depends on the fit's, so it does not run when the fit is interrupted:
# marimo's stop button ends the fit's cell stopped). A resume cell, gated by a run button, continues a stopped fit when clicked, and
# never by itself when the learner's cell re-runs (marimo re-runs the cells that use `learn`). Settings come from the
# environment: TRAINER_NB_EPOCHS, TRAINER_NB_STEP_DELAY, TRAINER_NB_RUN_DIR.
import marimo

app = marimo.App()


@app.cell
def _():
    import os, time, hashlib
    import marimo as mo
    import torch
    from trainer_nb.all import Learner, LambdaCallback, accuracy
    from trainer_nb.demo import digits_dls, digits_model

    EPOCHS = int(os.environ.get('TRAINER_NB_EPOCHS', '6'))
    STEP_DELAY = float(os.environ.get('TRAINER_NB_STEP_DELAY', '0.03'))
    RUN_DIR = os.environ.get('TRAINER_NB_RUN_DIR', 'runs/marimo')

    def make_learner(path, delay=STEP_DELAY):
        torch.manual_seed(0)
        # slowed while it is watched and interrupted; its resume, and the fit never stopped, run at full speed
        slow = LambdaCallback(before_batch=lambda l: l.training and l.fit_kind == 'fit' and time.sleep(delay))
        return Learner(digits_model(), digits_dls(bs=32), torch.nn.functional.cross_entropy, lr=3e-3,
                       metrics=[accuracy], path=path, cbs=[slow])

    def digest(learner):
        return hashlib.sha256(b''.join(p.detach().numpy().tobytes() for p in learner.model.parameters())).hexdigest()

    learn = make_learner(RUN_DIR)
    return EPOCHS, RUN_DIR, digest, learn, make_learner, mo


@app.cell
def _(EPOCHS, learn):
    learn.fit(EPOCHS)
    fitted = True
    return (fitted,)


@app.cell
def _(fitted, learn, mo):
    mo.md(f"RESULT stop_reason={learn.stop_reason} step={learn.step} fitted={fitted}")
    return


@app.cell
def _(mo):
    resume = mo.ui.run_button(label='Resume the fit')
    resume
    return (resume,)


@app.cell
def _(EPOCHS, RUN_DIR, digest, learn, make_learner, mo, resume):
    mo.stop(not resume.value)  # only a click runs this cell: a re-run of the learner's cell does not resume by itself
    learn.resume()
    straight = make_learner(RUN_DIR + '-straight', delay=0)  # the same fit, never stopped: the weights must be the same
    straight.fit(EPOCHS)
    mo.output.append(mo.md(f"RESUMED stop_reason={learn.stop_reason} step={learn.step} "
                           f"same_weights={digest(learn) == digest(straight)}"))
    return


if __name__ == "__main__":
    app.run()
