"""The fits that tests/test_trackers.py reports to a tracker, and the processes it starts:

- `python tracker_fit.py resume TRACKER FOLDER PROJECT URI CHECKPOINT`: a new process that loads CHECKPOINT and resumes;
- `torchrun --nproc_per_node=2 tracker_fit.py ddp TRACKER FOLDER PROJECT URI`: a fit on 2 processes.

The tracker's place (TRACKIO_DIR, WANDB_DIR, the MLflow URI) comes from the environment and URI, set by the test."""
import sys

import torch

from trainer_nb.callback.core import LambdaCallback
from trainer_nb.testing import synth_learner
from trainer_nb.trackers import MLflowWriter, TrackioWriter, WandbWriter

STOP = 10  # the step the stopped fits stop at
LOG_EVERY = 5


def stop_at(step: int) -> LambdaCallback:
    "Stop the fit after optimizer step `step`."
    return LambdaCallback(after_batch=lambda learn: learn.request_stop() if learn.training and learn.step == step
                          else None)


def tracker_writer(tracker: str, project: str, uri: str | None = None, **kwargs):
    "A writer to `tracker`, offline, in `project` (`kwargs`: the writer's own)."
    if tracker == 'trackio': return TrackioWriter(project=project, **kwargs)
    if tracker == 'wandb':
        import wandb
        return WandbWriter(project=project, mode='offline', **kwargs,
                           settings=wandb.Settings(console='off', x_disable_stats=True, x_disable_machine_info=True,
                                                   disable_git=True, disable_code=True))
    if tracker == 'mlflow': return MLflowWriter(project=project, tracking_uri=uri, **kwargs)
    raise ValueError(tracker)


def learner(folder, tracker: str, project: str, uri: str | None = None, stop: int | None = STOP, writer=None):
    "The same learner every time: 8 steps an epoch, a validation at each epoch end, writers every 5 steps."
    torch.manual_seed(0)
    learn = synth_learner(path=folder, default_cbs=True, progress=False, cbs=[stop_at(stop)] if stop else [],
                          report_to=writer or tracker_writer(tracker, project, uri))
    learn.report.log_every = LOG_EVERY
    return learn


if __name__ == '__main__':
    mode, tracker, folder, project, uri = sys.argv[1:6]
    uri = uri or None
    if mode == 'resume':
        learn = learner(folder, tracker, project, uri)
        learn.load(sys.argv[6])
        learn.resume()
    elif mode == 'ddp':
        from trainer_nb.distributed import DistributedTrainer
        torch.manual_seed(0)
        learn = synth_learner(path=folder, default_cbs=True, progress=False, cbs=[DistributedTrainer()],
                              report_to=tracker_writer(tracker, project, uri), device='cpu')
        learn.report.log_every = LOG_EVERY
        learn.fit(2)
    print(f"rank {learn.rank} of {learn.comm.world_size}: step {learn.step}, {learn.stop_reason}")
