"""Sphinx extension: give each API entry the anchor nbdev's links use.

nbdev links a symbol to `<page>.html#<qualified name, lowercased>` (`learner.html#learner.fit`), but docutils
turns a heading into an id of letters, digits and hyphens (`learner-fit`), and numbers duplicates (the page
title "Learner" takes `learner`, the class entry gets `id1`). tools/nbdev_plain.py marks every API entry
with the class `api-entry`; here, before Sphinx collects the page's table of contents, each such section gets
its nbdev anchor as its first id, and any other section that had that id keeps a suffixed one.
"""
from docutils import nodes


def nbdev_anchor(section: nodes.section) -> str:
    "The anchor nbdev gives the symbol an API entry documents: its heading, lowercased."
    return section.next_node(nodes.title).astext().strip().lower()


def set_api_anchors(app, doctree: nodes.document):
    entries = {s: nbdev_anchor(s) for s in doctree.findall(nodes.section) if 'api-entry' in s['classes']}
    wanted = set(entries.values())
    renamed = {}
    for node in doctree.findall(nodes.Element):
        if node in entries: continue
        for i in node.get('ids', []):
            if i in wanted: renamed[i] = f'{i}-section'
        node['ids'] = [renamed.get(i, i) for i in node.get('ids', [])]
    for section, anchor in entries.items():
        section['ids'] = [anchor] + [i for i in section['ids'] if i != anchor]
    for old, new in renamed.items():
        if old in doctree.ids: doctree.ids[new] = doctree.ids.pop(old)
    for name, i in list(doctree.nameids.items()):
        if i in renamed: doctree.nameids[name] = renamed[i]
    for section, anchor in entries.items(): doctree.ids[anchor] = section


def setup(app):
    app.connect('doctree-read', set_api_anchors, priority=100)  # before the toctree collector (500)
    return {'version': '1.0', 'parallel_read_safe': True, 'parallel_write_safe': True}
