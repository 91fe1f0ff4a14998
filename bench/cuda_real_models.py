"""The tutorial "Bring your own model" on a GPU: its tiny BERT (dict batches, the model's own loss) trained on CUDA in
bf16 autocast and in fp16 with a GradScaler (`MixedPrecision`), with the host syncs of each step counted by
`torch.cuda.set_sync_debug_mode('warn')`, against a hand-written loop doing the same; then an interrupted fit
resumed (CUDA random streams included), and a compiled fit's graph count.

Needs a CUDA GPU, and transformers. Run: python bench/cuda_real_models.py [--steps 64]
"""
import argparse
import contextlib
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.callback.core import LambdaCallback  # noqa: E402
from trainer_nb.callback.training import MixedPrecision  # noqa: E402
from trainer_nb.learner import Learner  # noqa: E402
from trainer_nb.metrics import accuracy  # noqa: E402
from trainer_nb.testing import token_dls  # noqa: E402

PRECISIONS = {'bf16': torch.bfloat16, 'fp16': torch.float16}


def tiny_bert():
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(vocab_size=32, hidden_size=32, num_hidden_layers=2,
                                                    num_attention_heads=2, intermediate_size=64,
                                                    max_position_embeddings=32, num_labels=2))


def learner(dtype, path, **kwargs):
    torch.manual_seed(0)
    return Learner(tiny_bert(), token_dls(n_train=512, bs=32), lr=3e-3, metrics=[accuracy], path=path,
                   progress=False, cbs=[MixedPrecision(dtype)], **kwargs)


@contextlib.contextmanager
def counted_syncs():
    "Count the synchronizing CUDA calls made inside the block (each one is a warning in 'warn' mode)."
    found = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter('always')
        torch.cuda.set_sync_debug_mode('warn')
        try: yield found
        finally:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode(0)
            found.extend(w for w in seen if 'synchroniz' in str(w.message))


def where(w) -> str: return f"{Path(w.filename).name}:{w.lineno}"


def hand_loop(dtype, steps: int):
    "The same training by hand: autocast, the model's loss, a GradScaler for fp16."
    model = tiny_bert().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, fused=True)
    scaler = torch.amp.GradScaler('cuda', enabled=dtype == torch.float16)
    dl = token_dls(n_train=512, bs=32).train
    model.train()
    done = 0
    while done < steps:
        for batch in dl:
            batch = {k: v.cuda(non_blocking=True) for k, v in batch.items()}
            with torch.autocast('cuda', dtype=dtype): loss = model(**batch).loss
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            done += 1
            if done == steps: return


def weights_equal(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=64)
    args = parser.parse_args()
    assert torch.cuda.is_available(), "this benchmark needs a CUDA GPU"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.steps} steps a measured fit")
    for name, dtype in PRECISIONS.items():
        with tempfile.TemporaryDirectory() as run:
            learn = learner(dtype, run)
            learn.fit(n_steps=16)  # warm-up: kernels, allocator, the first validation
            with counted_syncs() as syncs:
                t0 = time.perf_counter()
                learn.fit(n_steps=args.steps)
                seconds = time.perf_counter() - t0
            hand_loop(dtype, 16)
            with counted_syncs() as hand_syncs: hand_loop(dtype, args.steps)
            spots = sorted({where(w) for w in syncs})
            print(f"\n{name}: Learner {len(syncs) / args.steps:.2f} host syncs a step ({len(syncs)} in "
                  f"{args.steps} steps and their validations), hand loop {len(hand_syncs) / args.steps:.2f}; "
                  f"{seconds / args.steps * 1000:.2f} ms a step; valid {learn.valid_results}")
            print(f"  where the Learner's syncs are: {spots[:8]}")
            print(f"  where the hand loop's are: {sorted({where(w) for w in hand_syncs})[:8]}")
            reference = learner(dtype, run)
            reference.fit(3)
            stopped = learner(dtype, run)
            stopped.fit(3, cbs=[LambdaCallback(after_batch=lambda l: l.request_stop() if l.step == 20 else None)])
            stopped.resume()
            restarted = learner(dtype, run)
            restarted.fit(3, cbs=[LambdaCallback(after_batch=lambda l: l.request_stop() if l.step == 27 else None)])
            fresh = learner(dtype, run)
            fresh.load('last')
            with warnings.catch_warnings():
                warnings.simplefilter('ignore')
                fresh.resume()
            print(f"  exact resume on CUDA: in process {weights_equal(stopped.model, reference.model)}, "
                  f"from disk {weights_equal(fresh.model, reference.model)}")
    from torch._dynamo.utils import counters
    with tempfile.TemporaryDirectory() as run:
        t0 = time.perf_counter()
        learn = learner(torch.bfloat16, run, compile=True)
        learn.fit(1)
        first = time.perf_counter() - t0
        graphs = counters['stats']['unique_graphs']
        learn.fit(3)
        print(f"\ncompiled bf16: first epoch {first:.1f} s with compilation, {graphs} graphs after it, "
              f"{counters['stats']['unique_graphs']} after 3 more epochs; valid {learn.valid_results}")


if __name__ == '__main__': main()
