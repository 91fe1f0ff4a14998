"""The cost of metrics.json's lines, timed alone: a write of 20 steps of the five scalars the Recorder logs together.

Two ways to make the same bytes (checked equal here): each step's line from a dict through the `json` encoder
(`rows_by_iteration` + `_json_line`, the writer's way for lines that mix values logged apart), and the rows of the
scalars logged together through one `%`-format a line (`logged_together` + `line_format`, the writer's way for a
write of steps only). Also the `repr` of the floats alone, the part neither way avoids.

Run: python bench/writer_lines.py [--repeat 5000]
"""
import argparse
import random
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from trainer_nb.callback.recorder import _LOSS_ROW  # noqa: E402
from trainer_nb.events import EventStorage, ScalarRow  # noqa: E402
from trainer_nb.writers import _json_line, line_format, logged_together, rows_by_iteration  # noqa: E402


def storage_of(steps: int = 2000) -> EventStorage:
    "A storage with `steps` steps of the Recorder's row: a loss, lr, samples and two times, as a fit logs them."
    rng, storage = random.Random(0), EventStorage()
    row = ScalarRow(storage, _LOSS_ROW)
    for _ in range(steps):
        storage.iter += 1
        row.put(rng.random() * 3, 1e-3, 64.0 * storage.iter, 6.5e-4 + rng.random() * 1e-5, 2.4e-4 + rng.random() * 1e-5)
    return storage


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--repeat', type=int, default=5000)
    args = parser.parse_args()
    storage, new = storage_of(), {name: 20 for name in _LOSS_ROW}

    def as_records():
        records = rows_by_iteration(storage, new)
        return [_json_line({'iter': it, **records[it]}) for it in records]

    def as_rows():
        names, rows, _ = logged_together(storage, new)
        return list(map(line_format(names).__mod__, rows))

    assert as_records() == as_rows(), "the two ways must make the same lines"
    floats = [v for row in logged_together(storage, new)[1] for v in row[1:]]
    for name, fn in (('dict + json encoder a line', as_records), ('rows + one format a line', as_rows),
                     ('repr of the 100 floats alone', lambda: list(map(repr, floats)))):
        us = min(timeit.repeat(fn, number=args.repeat, repeat=3)) / args.repeat * 1e6
        print(f"{name}: {us:.1f} us a write of 20 steps ({us / 20:.2f} us a step)")


if __name__ == '__main__':
    main()
