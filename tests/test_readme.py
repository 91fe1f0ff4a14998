"""The README is the front door: its python snippets, run in order as shown, in a fresh process, must work.
(They are what a reader copies first; an import left in a hidden cell of nbs/index.ipynb once broke them.)"""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_BLOCK = re.compile(r'^```python\n(.*?)^```$', re.M | re.S)


def readme_snippets(text: str) -> list[str]:
    "The ```python blocks of a markdown text, in order."
    return PYTHON_BLOCK.findall(text)


def test_readme_snippets_finds_each_block():
    text = "# t\n\n```python\na = 1\n```\n\n```sh\nls\n```\n\n```\n2\n```\n\n```python\nb = a + 1\nprint(b)\n```\n"
    assert readme_snippets(text) == ['a = 1\n', 'b = a + 1\nprint(b)\n']


def test_readme_snippets_run_as_shown(tmp_path):
    snippets = readme_snippets((ROOT / 'README.md').read_text(encoding='utf-8'))
    assert len(snippets) >= 2 and 'import' in snippets[0]
    script = tmp_path / 'readme_snippets.py'
    script.write_text('\n'.join(f"print('--- snippet {i}', flush=True)\n{code}" for i, code in enumerate(snippets)))
    cwd, tmp = tmp_path / 'cwd', tmp_path / 'tmp'
    cwd.mkdir(), tmp.mkdir()
    env = {**os.environ, 'TMPDIR': str(tmp),  # tempfile.mkdtemp() run folders go under tmp_path
           'PYTHONPATH': os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')])}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env=env)
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert f'--- snippet {len(snippets) - 1}' in proc.stdout
    assert list(cwd.iterdir()) == []  # the snippets write to a temporary run folder only
    runs = [p for p in tmp.iterdir() if p.is_dir()]
    assert any((p / 'metrics.json').is_file() for p in runs), runs
