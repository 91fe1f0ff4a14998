"""Checkpoints of what trains: a peft LoRA BERT saves its adapters, its classifier and the buffers, with a fingerprint
of the frozen base instead of its values; it loads into the same base, is refused by another one, and resumes from
disk bit for bit. peft is a test dependency (the `dev` extra); the package itself never imports it.
"""
import pytest
import torch

peft = pytest.importorskip('peft')

from transformers import BertConfig, BertForSequenceClassification

from test_real_models import stop_at
from trainer_nb.checkpoint import CheckpointError, load_checkpoint, model_state
from trainer_nb.learner import Learner
from trainer_nb.testing import token_dls, weights


def small_bert(seed: int = 0) -> torch.nn.Module:
    """A BERT classifier built from a config (no download), its weights from `seed`: 2 layers of width 128 and a
    vocabulary of 8000, like a tokenizer's (the toy data uses 32 of them), so that most weights cost no compute."""
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=8000, hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=512, max_position_embeddings=32, num_labels=2)
    return BertForSequenceClassification(config)


def lora_bert(seed: int = 0) -> torch.nn.Module:
    "`small_bert` (its base weights from `seed`) with LoRA adapters on query and value; the classifier trains too."
    base = small_bert(seed)
    torch.manual_seed(0)  # the adapters' initialisation: the same on every base
    config = peft.LoraConfig(task_type='SEQ_CLS', r=4, lora_alpha=8, lora_dropout=0.1, target_modules=['query', 'value'])
    return peft.get_peft_model(base, config)


def lora_learner(path, seed: int = 0, **kwargs) -> Learner:
    model = lora_bert(seed)
    torch.manual_seed(0)  # the data order: the same in every learner of a comparison
    return Learner(model, token_dls(n_train=128), path=path, progress=False, lr=1e-2, **kwargs)


def test_a_checkpoint_holds_what_trains_and_a_fingerprint_of_the_base(tmp_path):
    learn = lora_learner(tmp_path)
    learn.fit(1)
    small = learn.save('last')
    full_learn = lora_learner(tmp_path, full_checkpoints=True)
    full_learn.fit(1)
    full = full_learn.save('full')
    assert weights(full_learn.model) == weights(learn.model)
    model = learn.raw_model
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    saved = load_checkpoint(small)
    state = model_state(model)
    n_params = sum(p.numel() for p in model.parameters())
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert n_trainable / n_params < 0.05
    assert trainable <= set(saved['model'])  # every trainable parameter...
    assert not set(saved['model']) & set(saved['frozen'])  # ...and no frozen value, only its fingerprint
    assert set(saved['model']) | set(saved['frozen']) == set(state)
    assert any('lora_A' in k for k in saved['model']) and any('base_layer' in k for k in saved['frozen'])
    assert 'base_model.model.bert.embeddings.word_embeddings.weight' in saved['frozen']
    assert list(load_checkpoint(full)['model']) == list(state) and load_checkpoint(full)['frozen'] == {}
    print(f"\npeft LoRA BERT: {n_params:,} parameters, {n_trainable:,} trainable ({n_trainable / n_params:.1%}); "
          f"last.pt {small.stat().st_size:,} bytes, full checkpoint {full.stat().st_size:,} bytes")
    assert small.stat().st_size < 0.05 * full.stat().st_size


def test_it_loads_into_the_same_base_and_is_refused_by_another(tmp_path):
    learn = lora_learner(tmp_path)
    learn.fit(1)
    learn.save('last')
    same = lora_learner(tmp_path).load('last')
    assert weights(same.model) == weights(learn.model) and same.step == learn.step
    other = lora_learner(tmp_path, seed=1)  # another base: the same architecture, another random initialisation
    before, opt_before = weights(other.model), str(other.opt.state_dict())
    with pytest.raises(CheckpointError, match=r"trained on other frozen weights: base_model\.model\.bert\.embeddings"
                                              r"\.word_embeddings\.weight: other values .*Nothing was loaded"):
        other.load('last')
    with pytest.raises(CheckpointError, match='word_embeddings.weight: other values'):
        other.load('last', weights_only_model=True)
    assert weights(other.model) == before and str(other.opt.state_dict()) == opt_before and other.step == 0
    half = lora_learner(tmp_path)
    half.model.half()  # the same weights in another dtype
    with pytest.raises(CheckpointError, match='dtype torch.float32 in the checkpoint, torch.float16 in this model'):
        half.load('last', weights_only_model=True)
    weights_only = lora_learner(tmp_path).load('last', weights_only_model=True)
    assert weights(weights_only.model) == weights(learn.model) and weights_only.step == 0


def test_resume_from_disk_is_bit_identical(tmp_path):
    reference = lora_learner(tmp_path / 'reference')
    reference.fit(2)
    stopped = lora_learner(tmp_path / 'stopped')
    stopped.fit(2, cbs=stop_at(5))
    assert (stopped.stop_reason, stopped.step) == ('interrupted', 5)
    assert (tmp_path / 'stopped' / 'checkpoints' / 'last.pt').is_file()  # (SaveOnStop)
    restarted = lora_learner(tmp_path / 'stopped')  # a new learner, as after a kernel restart
    restarted.load('last')
    restarted.resume(cbs=stop_at(5))
    assert (restarted.stop_reason, restarted.step) == ('completed', reference.step)
    assert weights(restarted.model) == weights(reference.model)
    assert str(restarted.opt.state_dict()) == str(reference.opt.state_dict())
    assert (restarted.storage.history('train/loss').values() == reference.storage.history('train/loss').values())
