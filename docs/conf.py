"""Sphinx configuration of the trainer_nb docs site (built by tools/build_docs.sh).

The pages are the notebooks of nbs/, processed by nbdev (tools/proc_docs.py) and made plain for Sphinx
(tools/nbdev_plain.py) into _plain/. Project, author, version and copyright come from settings.ini, as for
the package itself.
"""
import configparser
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # nbdev_anchors

_cfg = configparser.ConfigParser()
_cfg.read(HERE.parent / 'settings.ini', encoding='utf-8')
_settings = _cfg['DEFAULT']

project = _settings['title'] if 'title' in _settings else _settings['lib_name']
author = _settings['author']
copyright = _settings['copyright']
version = release = _settings['version']

extensions = ['myst_nb', 'nbdev_anchors']
nb_execution_mode = 'off'  # the outputs are those saved in nbs/; _plain/ notebooks cannot run on their own
nb_merge_streams = True
myst_enable_extensions = ['colon_fence', 'dollarmath', 'attrs_inline', 'attrs_block', 'deflist']
myst_heading_anchors = 3
exclude_patterns = ['_build', '**.ipynb_checkpoints', '.jupyter_cache', 'jupyter_execute']
master_doc = root_doc = 'index'

html_theme = 'furo'
html_title = f"{project} {version}"
html_static_path = [str(HERE / '_static')]
html_css_files = ['trainer_nb.css']
html_copy_source = False      # no _sources/*.ipynb.txt copies of the notebooks
html_show_sourcelink = False
html_theme_options = {'navigation_with_keys': True}
smartquotes = False  # docstrings quote code: keep ' and " as typed
