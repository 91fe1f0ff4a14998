"""Importing trainer_nb stays light: no display libraries until a display is needed."""
import subprocess
import sys


def test_import_does_not_load_display_libraries():
    code = ("import sys, trainer_nb.all; "
            "print(sorted(m for m in ('matplotlib', 'ipywidgets', 'fastprogress', 'IPython') if m in sys.modules))")
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == '[]'


def test_public_api():
    import trainer_nb.all as api
    for name in ('Learner', 'DataLoaders', 'Callback', 'EventStorage', 'get_event_storage', 'accuracy',
                 'CancelFitException', 'JSONWriter', 'ProgressCallback', 'Recorder', 'WriterCallback'):
        assert name in api.__all__, name
