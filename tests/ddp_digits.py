"""A training script that runs as it is with `python ddp_digits.py RUN_FOLDER` or with
`torchrun --nproc_per_node=2 ddp_digits.py RUN_FOLDER`: the only distributed line is `DistributedTrainer()`."""
import sys

import torch
from torch import nn

from trainer_nb.demo import digits_dls, digits_model
from trainer_nb.distributed import DistributedTrainer
from trainer_nb.learner import Learner
from trainer_nb.metrics import accuracy

torch.manual_seed(0)
learn = Learner(digits_model(), digits_dls(bs=32), nn.functional.cross_entropy, lr=1e-2, metrics=[accuracy],
                path=sys.argv[1], device='cpu', cbs=[DistributedTrainer()])
learn.fit(3)
print(f"rank {learn.rank} of world {learn.comm.world_size}: step {learn.step}, accuracy {learn.valid_results['accuracy']:.4f}")
