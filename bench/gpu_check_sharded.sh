#!/usr/bin/env bash
# FSDP2 (ShardedTrainer) with two processes on ONE GPU over gloo, for the day a GPU machine is available:
# both processes put their shards on cuda:0, gloo carries the collectives. It checks that a sharded fit runs on the
# GPU, matches DistributedTrainer's losses, saves a sharded checkpoint (synchronous and background, DCP async_save
# over its own gloo group) and loads it back in one plain process; then the same with bf16 parameters
# (MixedPrecisionPolicy). It prints the figures to copy into bench/RESULTS.md.
#
# Run from the repository root:  bash bench/gpu_check_sharded.sh
# The same on the CPU (to check the script itself):  DEVICE=cpu bash bench/gpu_check_sharded.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" DEVICE="${DEVICE:-cuda}"
"${PYTHON:-python}" - <<'EOF'
import os, tempfile, time
from pathlib import Path
import torch
from torch import nn
from trainer_nb.demo import digits_dls, digits_model
from trainer_nb.distributed import DistributedTrainer, launch
from trainer_nb.learner import Learner
from trainer_nb.sharded import ShardedTrainer

device = os.environ['DEVICE']
if device == 'cuda': assert torch.cuda.is_available(), "no GPU here: run with DEVICE=cpu to check the script"
run = Path(tempfile.mkdtemp())

def fit(kind, mp=False):
    torch.manual_seed(0)
    if kind == 'fsdp':
        from torch.distributed.fsdp import MixedPrecisionPolicy
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mp else None
        cb = ShardedTrainer(backend='gloo', mp_policy=policy)
    else: cb = DistributedTrainer(backend='gloo')
    learn = Learner(digits_model(), digits_dls(bs=32), nn.functional.cross_entropy, lr=1e-2, device=device,
                    path=run / f'{kind}{"_bf16" if mp else ""}', progress=False, cbs=[cb])
    t0 = time.perf_counter()
    learn.fit(2)
    seconds = time.perf_counter() - t0
    out = {'device': str(learn.device), 'losses': [v for v, _ in learn.storage.history('train/loss').values()],
           'seconds': seconds}
    if kind == 'fsdp':
        w = learn.raw_model[0].weight
        out['weight'] = f"{type(w).__name__} on {w.to_local().device}, local {tuple(w.to_local().shape)} of {tuple(w.shape)}"
        t0 = time.perf_counter(); learn.save('sync'); out['sync_s'] = time.perf_counter() - t0
        t0 = time.perf_counter(); learn.save('bg', background=True); out['bg_wait_s'] = time.perf_counter() - t0
        from trainer_nb.checkpoint import wait_for_save
        wait_for_save(learn)
        out['bg_write_s'] = learn.storage.history('ckpt/write_s').latest()
        if device == 'cuda': out['peak_mb'] = torch.cuda.max_memory_allocated(learn.device) / 2**20
    return out

fsdp, ddp = launch(fit, 2, 'fsdp', backend='gloo'), launch(fit, 2, 'ddp', backend='gloo')
a, b = torch.tensor(fsdp['losses']), torch.tensor(ddp['losses'])
print(f"FSDP2 on {fsdp['device']} (2 processes, gloo): {fsdp['weight']}")
print(f"2 epochs: FSDP2 {fsdp['seconds']:.1f} s, DDP {ddp['seconds']:.1f} s; max |loss difference| {(a - b).abs().max():.2e}")
assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), "FSDP2 and DDP losses differ"
print(f"sharded save: synchronous {fsdp['sync_s']:.3f} s; background: waited {fsdp['bg_wait_s']:.3f} s, "
      f"written in {fsdp['bg_write_s']:.3f} s" + (f"; peak GPU memory {fsdp['peak_mb']:.0f} MiB" if 'peak_mb' in fsdp else ''))
plain = Learner(digits_model(), digits_dls(bs=32), nn.functional.cross_entropy, device=device, path=run / 'fsdp',
                progress=False).load('bg')
print(f"loaded in one plain process: step {plain.step}, weight {type(plain.model[0].weight).__name__} on "
      f"{plain.model[0].weight.device}")
bf16 = launch(fit, 2, 'fsdp', True, backend='gloo')
c = torch.tensor(bf16['losses'])
print(f"bf16 parameters (MixedPrecisionPolicy): last loss {c[-1]:.4f} vs fp32 {a[-1]:.4f}, {bf16['seconds']:.1f} s")
assert torch.isfinite(c).all()
print("gpu_check_sharded: OK")
EOF
