"""The package's structure: imports only go down (no module imports one that imports it back, locally or not), no
class has a base with one subclass and no other user, and `trainer_nb.all` exports what a user needs."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import structure  # noqa: E402


def test_no_circle_of_imports():
    graph = structure.import_graph()
    assert graph['trainer_nb.learner'] and 'trainer_nb.state' in graph['trainer_nb.checkpoint']  # (it reads them)
    assert structure.circles(graph) == []


def test_a_circle_is_found_through_a_local_import(tmp_path):
    "The check itself: two modules that import each other, one of them inside a function, make a circle."
    pkg = tmp_path / 'pkg'
    pkg.mkdir()
    (pkg / '__init__.py').write_text('')
    (pkg / 'low.py').write_text('def f():\n    from .high import g\n    return g\n')
    (pkg / 'high.py').write_text('from pkg.low import f\ndef g(): pass\n')
    assert structure.circles(structure.import_graph(pkg)) == [['pkg.high', 'pkg.low']]


def test_no_base_with_one_subclass_and_no_other_user():
    assert structure.one_subclass_chains() == []


def test_no_module_over_450_lines():
    "A module a reader can hold: the package's generated modules (not nbdev's index, `_modidx.py`) stay within 450 lines."
    long = {p.relative_to(ROOT).as_posix(): n for p in (ROOT / 'trainer_nb').rglob('*.py')
            if p.name != '_modidx.py' and (n := len(p.read_text().splitlines())) > 450}
    assert long == {}, long


def test_the_batch_body_asks_no_process_count_and_no_callback_for_a_method():
    """Issue 41: the learner does not test how many processes train (its communicator does), and features are reached
    by declared events, not by asking a callback whether it has a method."""
    asked = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / 'trainer_nb').rglob('*.py')
             for i, line in enumerate(p.read_text().splitlines(), 1) if 'hasattr(cb' in line]
    assert asked == []
    assert 'world_size' not in (ROOT / 'trainer_nb' / 'learner.py').read_text()


def test_the_callbacks_learn_what_a_fit_logs_not_which_face_runs():
    """Issue 41: `fit` and `learn.loop` are one loop with two faces; the face is in the fit's plan (`plan['method']`)
    for the loop itself and for resume, but the callbacks (the Recorder, the progress table, the live plot) learn
    what a fit records from what it logs, not from the face."""
    asked = [f"{p.relative_to(ROOT)}:{i}" for p in (ROOT / 'trainer_nb' / 'callback').rglob('*.py')
             for i, line in enumerate(p.read_text().splitlines(), 1) if "'method'" in line or '"method"' in line]
    assert asked == []
