#!/usr/bin/env bash
# The GPU check of issue 33: the cuda-marked tests, then bench/gpu_bench.py, one line per check; then issue 34's
# bench/gpu_distributed.py (two processes sharing the GPU over gloo, started after CUDA was used here: launch twice,
# distribute with an interrupt and a resume); then issue 36's bench/gpu_check_sharded.sh (FSDP2 with two processes on
# one GPU over gloo, sharded and background saves). About 11 minutes at most on one H100 (each part has its own
# timeout): with a 15-minute device budget, give the machine back right after it.
#
# What it expects: this repository, and a Python (`python`, or $PYTHON) whose torch is a CUDA build that sees a
# GPU. It runs the repository's code from the checkout (PYTHONPATH), not an installed copy. The GPU tests are all in
# tests/test_cuda.py, so it collects that module alone: the other test modules import the notebook and browser tools
# (ipykernel, nbdev, playwright), which a GPU image seldom has. If trainer_nb's dependencies or what the checks
# use (fastprogress, pytest, transformers) are missing, it installs the repository with its dev extras
# (`pip install -e .[dev]`) into that Python, holding torch at the installed version (a constraint), so torch is
# never replaced; without a network that install fails, and the script says so and stops. peft is needed only for
# the LoRA check (skipped without it). The tests fill the GPU on purpose: use a GPU nothing else is using.
#
# Run from anywhere: bash bench/gpu_check.sh        (exit status: that of the tests, or of the benchmark)
# Some parts only: bash bench/gpu_check.sh tests    (any of: tests bench distributed sharded, and profile, which is
# not in the default set; a rerun after a fix:
# the tests take about 45 s on an H100, the whole check about 5 minutes)
set -u
cd "$(dirname "$0")/.."
PARTS=" ${*:-tests bench distributed sharded} "
wants() { [[ "$PARTS" == *" $1 "* ]]; }
PY=${PYTHON:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" MPLBACKEND=Agg PYTHONUNBUFFERED=1

echo "== machine"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || echo "(no nvidia-smi)"
"$PY" -c "import sys, torch; print(f'python {sys.version.split()[0]}, torch {torch.__version__}, CUDA {torch.version.cuda}, '
          f'cuda available: {torch.cuda.is_available()}', f'({torch.cuda.get_device_name()})' if torch.cuda.is_available() else '')" \
    || { echo "no torch in $PY: install a CUDA build of torch first"; exit 2; }
echo "git: $(git log -1 --format='%h %s' 2>/dev/null | cut -c1-100)"
# (a copy of a working tree may carry an older .git: this says which sources ran; the same command here matches it.
# In Python, not `cat trainer_nb/*.py`: a shell's glob order depends on its locale, and so would the hash)
echo "trainer_nb sources: $("$PY" -c "import hashlib, pathlib; print(hashlib.sha1(b''.join(p.read_bytes() for p in sorted(pathlib.Path('trainer_nb').rglob('*.py')))).hexdigest()[:12])")"

# (what the test modules import when pytest collects them, as well as what the GPU checks use)
if ! "$PY" -c "import trainer_nb.all, fastprogress, pytest, transformers" 2>/dev/null; then
    echo "== installing the repository's dev extras (torch held at its installed version)"
    constraint=$(mktemp)
    "$PY" -c "import torch; print('torch==' + torch.__version__)" > "$constraint"
    timeout 300 "$PY" -m pip install -q -c "$constraint" -e ".[dev]" \
        || { echo "pip install -e .[dev] failed (no network?): install trainer_nb's requirements, pytest and transformers"; exit 2; }
    rm -f "$constraint"
fi

tests=0 bench=0 distributed=0 sharded=0
if wants tests; then
    echo "== tests: pytest -m cuda tests/test_cuda.py"
    timeout 200 "$PY" -m pytest -m cuda tests/test_cuda.py -q -rfEsxXp --tb=line -p no:cacheprovider
    tests=$?
    [ "$tests" = 124 ] && echo "(the tests ran past their 200 s)"
fi

if wants bench; then
    echo "== benchmark: bench/gpu_bench.py"
    timeout 270 "$PY" bench/gpu_bench.py
    bench=$?
    [ "$bench" = 124 ] && echo "(the benchmark ran past its 270 s: the lines above are what it measured)"
fi

if wants profile; then  # (not in the default parts: where the learner's host time a step goes, ~30 s on an H100)
    echo "== the learner's host work a step against a hand loop: bench/gpu_host_profile.py"
    timeout 120 "$PY" bench/gpu_host_profile.py --rounds 5 --top 15
fi

if wants distributed; then
    echo "== distributed from a notebook's process, after CUDA: bench/gpu_distributed.py"
    timeout 150 "$PY" bench/gpu_distributed.py
    distributed=$?
    [ "$distributed" = 124 ] && echo "(the distributed check ran past its 150 s)"
fi

if wants sharded; then
    echo "== sharded (FSDP2) on one GPU over gloo: bench/gpu_check_sharded.sh"
    PYTHON="$PY" timeout 90 bash bench/gpu_check_sharded.sh
    sharded=$?
    [ "$sharded" = 124 ] && echo "(the sharded check ran past its 90 s)"
fi

echo "== ran:$PARTS; tests exit $tests, benchmark exit $bench, distributed exit $distributed, sharded exit $sharded"
[ "$tests" = 0 ] || exit "$tests"
[ "$bench" = 0 ] || exit "$bench"
[ "$distributed" = 0 ] || exit "$distributed"
exit "$sharded"
