"""The digits with each sample's index as a last feature: which samples each process of a distributed fit trained on."""
import torch
from torch import nn
from torch.utils.data import Dataset

from trainer_nb.callback.core import Callback
from trainer_nb.demo import digits_datasets


class Indexed(Dataset):
    "The first `n` training digits, each with its index as a last feature (a model drops it with `DropIndex`)."
    def __init__(self, n):
        train, _ = digits_datasets()
        self.ds, self.n = train, n
    def __len__(self): return self.n
    def __getitem__(self, i):
        x, y = self.ds[i]
        return torch.cat([x, torch.tensor([float(i)])]), y


class DropIndex(nn.Module):
    def forward(self, x): return x[:, :-1]


class SeenSamples(Callback):
    "Record the index of each training sample this process takes."
    def __init__(self): self.seen = []
    def before_batch(self):
        if self.learn.training: self.seen += [int(i) for i in self.learn.batch[0][:, -1]]
