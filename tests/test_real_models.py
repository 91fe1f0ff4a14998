"""Models as users bring them: a transformers BERT on dict batches from a collator, a model output that carries its
own loss and logits, torch.compile (checkpoints with plain keys, a bounded number of graphs, exact resume),
torchmetrics metric objects, and a detectron2-style dict of losses.

transformers and torchmetrics are test dependencies (the `dev` extra); the package itself never imports them.
"""
import sys
from collections import UserDict

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from trainer_nb.callback.core import LambdaCallback
from trainer_nb.checkpoint import CheckpointError, load_checkpoint
from trainer_nb.files import atomic_save
from trainer_nb.learner import Learner
from trainer_nb.metrics import accuracy
from trainer_nb.testing import TokenData, pad_collate, token_dls, weights

from transformers import BertConfig, BertForSequenceClassification


def tiny_bert(seed: int = 0, dropout: float = 0.1) -> nn.Module:
    "A BERT classifier built from a config (no download): 2 layers of width 32, dropout on."
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, num_labels=2,
                        hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return BertForSequenceClassification(config)


def bert_learner(path, seed: int = 0, **kwargs) -> Learner:
    torch.manual_seed(0)  # the data order: the same in every learner of a comparison
    kwargs.setdefault('lr', 3e-3)
    return Learner(tiny_bert(seed), token_dls(), path=path, progress=False, **kwargs)


def stop_at(step: int) -> LambdaCallback:
    return LambdaCallback(after_batch=lambda learn: learn.request_stop() if learn.step == step else None)


# ---- dict batches and model outputs

def test_dict_batches_train_on_the_models_own_loss(tmp_path):
    learn = bert_learner(tmp_path, lr=1e-2, metrics=[accuracy])
    seen = {}
    learn.fit(1, cbs=[LambdaCallback(after_pred=lambda l: seen.setdefault('pred', l.pred),
                                     before_batch=lambda l: seen.setdefault('xb', l.xb))])
    assert isinstance(seen['xb'], dict) and sorted(seen['xb']) == ['attention_mask', 'input_ids', 'labels']
    assert type(seen['pred']).__name__ == 'SequenceClassifierOutput'  # callbacks see the output whole
    first = learn.storage.history('train/loss').values()[0][0]
    learn.fit(4)
    assert learn.stop_reason == 'completed' and learn.step == 5 * 16
    assert learn.storage.history('train/loss').median(8) < first  # it trains on the model's own loss
    res = learn.validate()
    assert set(res) == {'loss', 'accuracy'} and res['accuracy'] > 0.6, res  # metrics on the logits


def test_a_batch_encoding_like_mapping_is_a_dict_batch(tmp_path):
    "A transformers collator gives a BatchEncoding, a Mapping that is not a dict."
    dl = DataLoader(TokenData(64), batch_size=16, collate_fn=lambda items: UserDict(pad_collate(items)))
    learn = Learner(tiny_bert(), dl, path=tmp_path, progress=False)
    learn.fit(1)
    assert learn.step == 4 and learn.stop_reason == 'completed'


def test_a_loss_func_gets_the_model_output_whole(tmp_path):
    "(input_ids, labels) tuples and a loss_func of the output's logits: the output is not taken for a dict of losses."
    data = TokenData(96)
    batches = [(pad_collate([data[i] for i in range(j, j + 16)])['input_ids'],
                torch.tensor(data.labels[j:j + 16])) for j in range(0, 96, 16)]
    got = []
    def loss_func(out, y):
        got.append(type(out).__name__)
        return F.cross_entropy(out.logits, y)
    learn = Learner(tiny_bert(), (batches[:4], batches[4:]), loss_func, metrics=[accuracy], path=tmp_path,
                    progress=False)
    learn.fit(2)
    assert got and set(got) == {'SequenceClassifierOutput'}
    assert learn.stop_reason == 'completed' and 0 <= learn.valid_results['accuracy'] <= 1


def test_get_preds_gives_logits_and_labels(tmp_path):
    learn = bert_learner(tmp_path)
    learn.fit(1)
    preds, targets = learn.get_preds()
    assert preds.shape == (64, 2) and preds.dtype == torch.float32
    assert targets.tolist() == TokenData(64, seed=1).labels
    unlabelled = DataLoader(TokenData(20, seed=1), batch_size=8,
                            collate_fn=lambda items: {k: v for k, v in pad_collate(items).items() if k != 'labels'})
    preds, targets = learn.get_preds(unlabelled)  # no labels: no loss, no targets
    assert preds.shape == (20, 2) and targets is None
    ids = TokenData(20, seed=1)[0]['input_ids']
    one = learn.predict({'input_ids': ids, 'attention_mask': torch.ones_like(ids)})  # without its batch dimension
    torch.testing.assert_close(one, preds[0], atol=1e-5, rtol=1e-4)  # (the same, unpadded)


def test_an_output_without_loss_is_refused_at_the_first_batch(tmp_path):
    dl = DataLoader(TokenData(32), batch_size=16,
                    collate_fn=lambda items: {k: v for k, v in pad_collate(items).items() if k != 'labels'})
    learn = Learner(tiny_bert(), dl, path=tmp_path, progress=False)
    with pytest.raises(TypeError, match=r"returned a SequenceClassifierOutput of logits \(16, 2\), which has no loss"):
        learn.fit(1)
    assert learn.step == 0  # refused before any optimizer step


def test_target_key_names_another_key(tmp_path):
    class BagOfTokens(nn.Module):  # a model of one's own, whose batches name their targets 'y'
        def __init__(self):
            super().__init__()
            self.emb, self.head = nn.EmbeddingBag(32, 16, mode='sum'), nn.Linear(16, 2)
        def forward(self, input_ids, attention_mask, y=None):  # (a dict batch goes whole, its targets too)
            return self.head(self.emb(input_ids, per_sample_weights=attention_mask.float()))
    def collate(items):
        batch = pad_collate(items)
        return {'input_ids': batch['input_ids'], 'attention_mask': batch['attention_mask'], 'y': batch['labels']}
    dl = DataLoader(TokenData(64), batch_size=16, collate_fn=collate)
    learn = Learner(BagOfTokens(), (dl, dl), F.cross_entropy, metrics=[accuracy], target_key='y', lr=0.05,
                    path=tmp_path, progress=False)
    learn.fit(3)
    assert learn.valid_results['accuracy'] > 0.7, learn.valid_results
    assert learn.get_preds()[1].tolist() == TokenData(64).labels
    with pytest.raises(TypeError, match='target_key must be the key of the targets'):
        Learner(tiny_bert(), dl, target_key=1, path=tmp_path)


def test_torchmetrics_objects_work(tmp_path):
    tm = pytest.importorskip('torchmetrics.classification')
    learn = bert_learner(tmp_path, lr=1e-2, metrics=[tm.MulticlassAccuracy(2), tm.MulticlassF1Score(2), accuracy])
    learn.fit(3)
    res = learn.valid_results
    assert set(res) == {'loss', 'MulticlassAccuracy', 'MulticlassF1Score', 'accuracy'}
    assert res['MulticlassAccuracy'] == pytest.approx(res['accuracy'], abs=1e-6)  # macro over 2 balanced classes


def test_a_detectron2_style_dict_of_losses_still_trains(tmp_path):
    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.cls, self.box = nn.Linear(4, 3), nn.Linear(4, 2)
        def forward(self, images, classes, boxes):
            return {'loss_cls': F.cross_entropy(self.cls(images), classes),
                    'loss_box_reg': F.smooth_l1_loss(self.box(images), boxes)}
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 4, generator=g)
    items = [{'images': x[i], 'classes': int(x[i, 0] > 0), 'boxes': x[i, 2:] * 2} for i in range(64)]
    learn = Learner(Detector(), DataLoader(items, batch_size=16), lr=0.05, path=tmp_path, progress=False)
    learn.fit(5)
    h = learn.storage.histories()
    assert {'train/loss_cls', 'train/loss_box_reg', 'train/loss'} <= set(h)
    assert h['train/loss'].values()[-1][0] < h['train/loss'].values()[0][0]
    total, parts = h['train/loss'].latest(), h['train/loss_cls'].latest() + h['train/loss_box_reg'].latest()
    assert total == pytest.approx(parts, rel=1e-5)


# ---- exact resume of a transformers model with dropout on

def test_transformers_model_resumes_exactly(tmp_path):
    reference = bert_learner(tmp_path / 'ref')
    reference.fit(3)
    assert reference.raw_model.config.hidden_dropout_prob == 0.1
    in_process = bert_learner(tmp_path / 'mem')
    in_process.fit(3, cbs=[stop_at(11)])
    assert in_process.stop_reason == 'interrupted' and in_process.step == 11
    in_process.resume()
    assert weights(in_process.model) == weights(reference.model)
    stopped = bert_learner(tmp_path / 'disk')
    stopped.fit(3, cbs=[stop_at(13)])
    fresh = bert_learner(tmp_path / 'disk', seed=7)  # other weights: everything comes from the file
    fresh.load('last')
    with pytest.warns(UserWarning, match='pass them again'):  # (the stop_at callback: not needed any more)
        fresh.resume()
    assert weights(fresh.model) == weights(reference.model)
    assert fresh.storage.history('valid/loss').values() == reference.storage.history('valid/loss').values()


# ---- torch.compile

def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 2))


def mlp_dls():
    def data(n, seed):
        x = torch.randn(n, 8, generator=torch.Generator().manual_seed(seed))
        return TensorDataset(x, (x.sum(1) > 0).long())
    # 100 samples in batches of 16: the last batch has 4, another size
    return DataLoader(data(100, 0), batch_size=16, shuffle=True), DataLoader(data(40, 1), batch_size=16)


def mlp_learner(path, compile=False, model=None):
    torch.manual_seed(0)
    return Learner(model if model is not None else mlp(), mlp_dls(), F.cross_entropy, lr=1e-2, metrics=[accuracy],
                   path=path, progress=False, compile=compile)


@pytest.fixture
def dynamo():
    import torch._dynamo
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    yield counters
    torch._dynamo.reset()


def test_compiled_checkpoints_hold_plain_keys_and_load_either_way(tmp_path, dynamo):
    compiled = mlp_learner(tmp_path / 'compiled', compile={'backend': 'aot_eager'})
    assert type(compiled.model).__name__ == 'OptimizedModule' and compiled.raw_model is compiled.model._orig_mod
    compiled.fit(1)
    path = compiled.save('after1')
    assert list(load_checkpoint(path)['model']) == ['0.weight', '0.bias', '3.weight', '3.bias']
    plain = mlp_learner(tmp_path / 'plain', model=nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.2),
                                                                  nn.Linear(32, 2)))
    plain.load(path)
    assert weights(plain.model) == weights(compiled.raw_model) and plain.step == compiled.step
    plain.fit(1)
    back = mlp_learner(tmp_path / 'back', compile={'backend': 'aot_eager'})
    back.load(plain.save('plain'))
    assert weights(back.raw_model) == weights(plain.model)
    user_compiled = mlp_learner(tmp_path / 'user', model=torch.compile(mlp(), backend='aot_eager'))
    user_compiled.load(path)  # a model the user compiled: unwrapped the same way
    assert weights(user_compiled.raw_model) == weights(compiled.raw_model)


def test_checkpoints_written_before_plain_keys_still_load(tmp_path):
    "Before this change, a learner of a user-compiled model saved `_orig_mod.`-prefixed keys (and gradients)."
    learn = mlp_learner(tmp_path)
    learn.fit(1)
    state = learn.state_dict()
    state['model'] = {f'_orig_mod.{k}': v for k, v in state['model'].items()}
    atomic_save(state, tmp_path / 'old.pt')
    fresh = mlp_learner(tmp_path, model=nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2)))
    with pytest.raises(CheckpointError, match='missing from the checkpoint: 2.weight'):
        fresh.load(tmp_path / 'old.pt')  # (a model of other layers is still refused, with plain key names)
    fresh = mlp_learner(tmp_path)
    fresh.load(tmp_path / 'old.pt')
    assert weights(fresh.model) == weights(learn.model)


def test_a_compiled_fit_compiles_a_bounded_number_of_graphs(tmp_path, dynamo):
    learn = mlp_learner(tmp_path, compile={'backend': 'aot_eager'})
    learn.fit(2)  # training, validation (eval mode, no grad), and a last batch of 4: each seen by now
    after_two = dynamo['stats']['unique_graphs']
    assert 1 <= after_two <= 4, dict(dynamo['stats'])
    learn.fit(4)
    assert dynamo['stats']['unique_graphs'] == after_two, dict(dynamo['stats'])  # no recompile in later epochs
    assert not dynamo['graph_break'], dict(dynamo['graph_break'])


def test_compile_is_refused_twice_and_with_a_bad_value(tmp_path):
    with pytest.raises(ValueError, match='already wrapped'):
        mlp_learner(tmp_path, compile=True, model=torch.compile(mlp()))
    with pytest.raises(TypeError, match='compile must be True, False, or a dict'):
        mlp_learner(tmp_path, compile='yes')


@pytest.mark.slow
def test_a_compiled_model_resumes_exactly(tmp_path, dynamo):
    """With inductor (torch.compile's default backend, whose dropout draws differ from eager's): in process, and from
    disk after the graphs were dropped (on CUDA this needs compile=True's dynamic=True; see `compiled`)."""
    reference = mlp_learner(tmp_path / 'ref', compile=True)
    reference.fit(3)
    learn = mlp_learner(tmp_path / 'mem', compile=True)
    learn.fit(3, cbs=[stop_at(9)])
    learn.resume()
    assert weights(learn.raw_model) == weights(reference.raw_model)
    stopped = mlp_learner(tmp_path / 'disk', compile=True)
    stopped.fit(3, cbs=[stop_at(10)])
    torch._dynamo.reset()  # as after a restart: the resumed fit compiles its graphs afresh
    fresh = mlp_learner(tmp_path / 'disk', compile=True)
    fresh.load('last')
    with pytest.warns(UserWarning, match='pass them again'):  # (the stop_at callback: not needed any more)
        fresh.resume()
    assert weights(fresh.raw_model) == weights(reference.raw_model)


def test_the_package_never_imports_transformers_or_torchmetrics():
    import subprocess
    code = ("import sys, trainer_nb.all; from trainer_nb.testing import token_dls; "
            "print(sorted(m for m in ('transformers', 'torchmetrics', 'torch._dynamo') if m in sys.modules))")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '[]', out


@pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU (bench/cuda_real_models.py runs it there)')
@pytest.mark.parametrize('dtype', [torch.bfloat16, torch.float16], ids=['bf16', 'fp16'])
def test_cuda_mixed_precision_resumes_exactly_from_disk(tmp_path, dtype):
    "On CUDA: the checkpoint's random states (CUDA's too) and GradScaler come back, and the weights end the same."
    from trainer_nb.callback.training import MixedPrecision
    def make(path, seed=0):
        torch.manual_seed(0)
        return Learner(tiny_bert(seed), token_dls(), lr=3e-3, path=path, progress=False, cbs=[MixedPrecision(dtype)])
    reference = make(tmp_path / 'ref')
    reference.fit(2)
    stopped = make(tmp_path / 'run')
    stopped.fit(2, cbs=[stop_at(13)])
    fresh = make(tmp_path / 'run', seed=7)
    fresh.load('last')
    with pytest.warns(UserWarning, match='pass them again'):
        fresh.resume()
    assert fresh.device.type == 'cuda' and weights(fresh.model) == weights(reference.model)
