"""Convert nbdev's processed notebooks (`_proc/`) into plain notebooks that Sphinx + myst-nb can render
(`_plain/`), and write a GitHub README from the home notebook.

nbdev prepares notebooks for Quarto. What Quarto would do, this script does in the notebooks themselves:

- the YAML front matter (`title`, `description`, `output-file`) becomes a `# title` heading and a blurb, and
  the notebook is named after `output-file` (`04_learner.ipynb` -> `learner.ipynb`), so that nbdev's links
  (`learner.html#learner.fit`) keep working;
- `#|` directive lines are removed (`echo: false` becomes the tag `remove-input`, `output: false` the tag
  `remove-output`, `include: false` or `hide` drops the cell);
- the markdown that `output: asis` cells print is spliced into markdown cells (as Quarto does); for `show_doc`
  cells this makes each API entry a real heading (in the page's table of contents), marked `{.api-entry}`,
  which `docs/nbdev_anchors.py` then gives nbdev's anchor (`learner.fit`);
- stream outputs are shown as a terminal shows them (text progress bars redrawn with `\r` collapse);
- Pandoc link attributes (`[source](url){target="_blank"}`) and nbdev's links to the docs site become HTML
  links relative to the site; a link to a symbol with no entry keeps only its page, and links in headings
  become their text;
- `--toctree` adds the hidden tables of contents (tutorials, guides, API) to the home page.

`--readme` writes README.md from `nbs/index.ipynb` (`readme_nb` in settings.ini) as GitHub-flavoured markdown:
markdown cells as they are, code cells as ```python blocks, plain-text results; nothing that needs the site.

Usage: python tools/nbdev_plain.py [--src _proc] [--dest _plain] [--toctree] [--readme [PATH]] [--check]
"""
from __future__ import annotations

import argparse
import configparser
import copy
import html
import json
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

_DIRECTIVE = re.compile(r'^\s*#\|\s*(?P<key>[\w-]+)\s*(?P<colon>:?)\s*(?P<value>.*?)\s*$')
_FENCE = re.compile(r'^\s*(```|~~~)')
_HEADING = re.compile(r'^(?P<hashes>#{1,6})\s+(?P<text>.+?)\s*#*\s*$')
# [text](url) with optional Pandoc attributes {key="value" .class #id}; text may hold `code`, not brackets
_LINK = re.compile(r'\[(?P<text>[^\[\]]*)\]\((?P<url>[^()\s]+)\)(?:\{(?P<attrs>[^{}]*)\})?')
_ATTR = re.compile(r'(?P<key>[\w-]+)="(?P<value>[^"]*)"|\.(?P<cls>[\w-]+)|#(?P<id>[\w.-]+)')
_SKIP_DIRECTIVES = {'hide', 'export', 'exporti', 'exports', 'default_exp'}
SECTIONS = ('Tutorials', 'Guides', 'API reference', 'Internals')


def read_settings(root: Path = ROOT) -> configparser.SectionProxy:
    "The `[DEFAULT]` section of the project's settings.ini (nbdev's configuration)."
    cfg = configparser.ConfigParser()
    if not cfg.read(root / 'settings.ini', encoding='utf-8'):
        raise SystemExit(f"No settings.ini in {root}: run this from an nbdev project.")
    return cfg['DEFAULT']


def source(cell) -> str:
    src = cell.get('source', '')
    return ''.join(src) if isinstance(src, list) else src


def split_directives(src: str) -> tuple[dict, str]:
    "nbdev's `#| key: value` lines of a code cell as a dict, and the code without them."
    found, code = {}, []
    for line in src.splitlines():
        m = _DIRECTIVE.match(line)
        if m: found[m['key']] = m['value'] if m['colon'] else ''
        else: code.append(line)
    return found, '\n'.join(code).strip('\n')


def front_matter(nb: dict) -> tuple[dict, list]:
    "The YAML front matter of a processed notebook (its first raw `---` cell), and the other cells."
    cells = nb['cells']
    if cells and cells[0]['cell_type'] == 'raw' and source(cells[0]).lstrip().startswith('---'):
        text = source(cells[0]).strip().strip('-')
        return (yaml.safe_load(text) or {}), cells[1:]
    return {}, cells


def html_inline(text: str) -> str:
    "Markdown link text as HTML: `code` spans become <code>, the rest is escaped."
    parts = re.split(r'(`[^`]*`)', text)
    return ''.join(f'<code class="docutils literal notranslate">{html.escape(p[1:-1])}</code>' if p.startswith('`') and p.endswith('`') and len(p) > 1
                   else html.escape(p) for p in parts)


def html_attrs(attrs: str) -> str:
    "Pandoc attributes (`key=\"value\" .class #id`) as HTML attributes."
    out, classes = [], []
    for m in _ATTR.finditer(attrs or ''):
        if m['key']: out.append(f'{m["key"]}="{html.escape(m["value"])}"')
        elif m['cls']: classes.append(m['cls'])
        elif m['id']: out.append(f'id="{html.escape(m["id"])}"')
    if classes: out.insert(0, f'class="{" ".join(classes)}"')
    return (' ' + ' '.join(out)) if out else ''


@dataclass
class Site:
    "What the converter knows about the whole site: pages, API anchors, and nbdev's docs URL."
    prefix: str                                   # nbdev's links start with this: doc_host + doc_baseurl + '/'
    pages: dict = field(default_factory=dict)     # page name ('learner.html') -> set of API anchors
    notebooks: dict = field(default_factory=dict)  # source notebook name ('04_learner.ipynb') -> page name
    dropped: list = field(default_factory=list)   # links whose anchor has no entry: (page, url)

    def local_url(self, url: str) -> str | None:
        "The site-relative form of `url` if it points into the site, else None."
        if self.prefix and url.startswith(self.prefix): url = url[len(self.prefix):]
        elif re.match(r'^[a-z][a-z0-9+.-]*:', url) or url.startswith(('/', '#')): return None
        path, _, anchor = url.partition('#')
        path = self.notebooks.get(Path(path).name, path) if path.endswith('.ipynb') else path
        if path not in self.pages: return None
        if anchor and anchor not in self.pages[path]:
            self.dropped.append(url)
            return path
        return f'{path}#{anchor}' if anchor else path


def rewrite_links(text: str, site: Site | None, in_heading: bool = False) -> str:
    "Rewrite the links of one markdown line or paragraph (outside code blocks)."
    def repl(m):
        url, attrs, label = m['url'], m['attrs'], m['text']
        local = site.local_url(url) if site else None
        if in_heading and (local or (site and url.startswith(site.prefix))): return label
        if local: return f'<a href="{html.escape(local)}"{html_attrs(attrs)}>{html_inline(label)}</a>'
        if attrs is not None: return f'<a href="{html.escape(url)}"{html_attrs(attrs)}>{html_inline(label)}</a>'
        return m[0]
    return _LINK.sub(repl, text)


def rewrite_markdown(md: str, site: Site | None) -> str:
    "Rewrite links in markdown; inside fenced code, nbdev's links to the site go back to their text."
    out, fenced = [], False
    for line in md.splitlines():
        if _FENCE.match(line): fenced = not fenced
        if fenced or _FENCE.match(line):
            if site and site.prefix: line = _LINK.sub(lambda m: m['text'] if m['url'].startswith(site.prefix) else m[0], line)
            out.append(line)
        else: out.append(rewrite_links(line, site, in_heading=bool(_HEADING.match(line))))
    return '\n'.join(out)


def heading_levels(md: str) -> list[int]:
    "The levels of the markdown headings of `md`, outside code blocks."
    levels, fenced = [], False
    for line in md.splitlines():
        if _FENCE.match(line): fenced = not fenced
        elif not fenced and (m := _HEADING.match(line)): levels.append(len(m['hashes']))
    return levels


def show_doc_markdown(md: str, parent_level: int) -> tuple[str, str | None]:
    """One `show_doc` output as markdown for Sphinx: the heading, marked `{.api-entry}` and placed one level
    under the last prose heading, then the source link, signature and docstring in an `api-doc` container (so
    that the examples after an entry are not styled as part of it). Returns it and the entry's anchor."""
    lines = md.strip().splitlines()
    while lines and lines[0].strip() in ('---', ''): lines.pop(0)
    source_url, heading, anchor, body = None, [], None, []
    for line in lines:
        m = _HEADING.match(line)
        if anchor is None and m:
            name = m['text'].strip()
            anchor = name.lower()
            # nbdev: level 3 for a symbol, 4 for a method; keep them one level under the section they are in
            level = min(6, len(m['hashes']) - 3 + min(3, parent_level + 1))
            heading = ['{.api-entry}', f'{"#" * level} {name}', '']
        elif source_url is None and anchor is None and (link := _LINK.match(line)) and link['text'] == 'source':
            source_url = link['url']
        else: body.append(line)
    doc = '\n'.join(body).strip()
    if source_url:
        doc = f'<a class="api-source" href="{html.escape(source_url)}" target="_blank" rel="noopener">source</a>\n\n{doc}'
    return '\n'.join(heading + ['::::{container} api-doc', doc, '::::']) + '\n', anchor


def terminal_text(text: str) -> str:
    "Stream text as a terminal shows it: a carriage return goes back to the start of the line (progress bars)."
    lines = []
    for line in text.split('\n'):
        shown = ''
        for part in line.split('\r'): shown = part + shown[len(part):]
        lines.append(shown.rstrip() if '\r' in line else shown)
    return '\n'.join(lines)


def asis_markdown(cell) -> str:
    "The markdown a cell marked `output: asis` printed."
    texts = []
    for out in cell.get('outputs', []):
        data = out.get('data', {})
        if 'text/markdown' in data: texts.append(source({'source': data['text/markdown']}))
        elif out.get('output_type') == 'stream': texts.append(source({'source': out.get('text', '')}))
    return '\n\n'.join(t.strip() for t in texts if t.strip())


def page_name(path: Path, fm: dict) -> str:
    "The HTML page a notebook becomes: its `output-file`, else its name without the number (nbdev's rule)."
    if fm.get('output-file'): return Path(fm['output-file']).with_suffix('.html').name
    return re.sub(r'^\d+[a-z]?_', '', path.stem) + '.html'


def plain_cells(cells: list, fm: dict, site: Site | None) -> tuple[list, set]:
    "Convert the cells of one processed notebook; returns the new cells and the API anchors they define."
    new, anchors, md_run = [], set(), []
    last_level = 1

    def flush():
        if md_run:
            new.append({'cell_type': 'markdown', 'metadata': {}, 'source': '\n\n'.join(md_run)})
            md_run.clear()

    if fm.get('title'):
        head = f"# {fm['title']}"
        if fm.get('description'): head += f"\n\n:::{{container}} nb-blurb\n{fm['description']}\n:::"
        md_run.append(head)
    for cell in cells:
        kind, src = cell['cell_type'], source(cell)
        if kind == 'raw': continue
        if kind == 'markdown':
            if src.strip() == '<!-- WARNING: THIS FILE WAS AUTOGENERATED! DO NOT EDIT! -->': continue
            if site is not None: src = rewrite_markdown(src, site)
            levels = heading_levels(src)
            if levels: last_level = levels[-1]
            md_run.append(src.strip())
            continue
        directives, code = split_directives(src)
        if directives.keys() & _SKIP_DIRECTIVES or directives.get('include') == 'false': continue
        if directives.get('output') == 'asis':
            md = asis_markdown(cell)
            if 'show_doc' in code:
                md, anchor = show_doc_markdown(md, last_level)
                if anchor: anchors.add(anchor)
            if site is not None: md = rewrite_markdown(md, site)
            if md.strip(): md_run.append(md.strip())
            if directives.get('echo') == 'false': continue
            cell = {**cell, 'outputs': []}  # its output is the markdown above
        tags = [t for t in cell.get('metadata', {}).get('tags', [])]
        if directives.get('echo') == 'false': tags.append('remove-input')
        if directives.get('output') == 'false': tags.append('remove-output')
        if not code.strip() and not cell.get('outputs'): continue
        flush()
        out = copy.deepcopy(cell)
        out['source'], out['metadata'] = code, ({'tags': tags} if tags else {})
        for o in out.get('outputs', []):
            if o.get('output_type') == 'stream': o['text'] = terminal_text(source({'source': o.get('text', '')}))
        out.pop('id', None)
        new.append(out)
    flush()
    return new, anchors


def section_of(nb_path: Path, nbs: Path) -> str:
    """Where a page goes in the navigation: a tutorial, a guide (exports nothing), an API chapter (its module defines
    names of `trainer_nb.all`, the public API), or the internals (the loop's parts, importable from their modules)."""
    if 'tutorial' in nb_path.stem: return 'Tutorials'
    src = nbs / nb_path.name
    text = src.read_text(encoding='utf-8') if src.exists() else ''
    exp = re.search(r'#\|\s*default_exp\s+([\w.]+)', text)
    if not exp: return 'Guides'
    return 'API reference' if exp.group(1) in public_modules() else 'Internals'


def public_modules() -> set[str]:
    "The modules (as `default_exp` names them: `learner`, `callback.core`) that define the names of `trainer_nb.all`."
    import importlib
    api = importlib.import_module('trainer_nb.all')
    modules = {getattr(getattr(api, name), '__module__', '') for name in api.__all__}
    return {m.removeprefix('trainer_nb.') for m in modules if m.startswith('trainer_nb.') and m != 'trainer_nb.all'}


def toctree(sections: dict) -> str:
    "Hidden MyST toctrees, one per non-empty section, in the order of `SECTIONS`."
    blocks = []
    for caption in SECTIONS:
        docs = sections.get(caption)
        if docs: blocks.append("```{toctree}\n:hidden:\n:caption: " + caption + "\n\n" + '\n'.join(docs) + "\n```")
    return '\n\n'.join(blocks)


def convert(src: Path, dest: Path, nbs: Path, site_prefix: str, with_toctree: bool) -> Site:
    "Convert every notebook of `src` into `dest` (emptied first)."
    if not src.is_dir(): raise SystemExit(f"{src} does not exist: run nbdev's processing first (tools/build_docs.sh).")
    site = Site(prefix=site_prefix)
    books = []
    for path in sorted(src.glob('*.ipynb')):
        nb = json.loads(path.read_text(encoding='utf-8'))
        fm, cells = front_matter(nb)
        page = page_name(path, fm)
        if page in site.pages.values(): raise SystemExit(f"Two notebooks would both become {page}.")
        books.append((path, nb, fm, cells, page))
        site.notebooks[path.name] = page
        site.pages[page] = set()
    for path, nb, fm, cells, page in books:  # first pass: the anchors of every page
        site.pages[page] = plain_cells(cells, fm, None)[1]
    if dest.exists(): shutil.rmtree(dest)
    dest.mkdir(parents=True)
    sections: dict[str, list[str]] = {}
    for path, nb, fm, cells, page in books:
        if page != 'index.html': sections.setdefault(section_of(path, nbs), []).append(page[:-len('.html')])
    for path, nb, fm, cells, page in books:
        new, _ = plain_cells(cells, fm, site)
        if with_toctree and page == 'index.html' and sections:
            new.append({'cell_type': 'markdown', 'metadata': {}, 'source': toctree(sections)})
        meta = {k: v for k, v in nb.get('metadata', {}).items() if k in ('kernelspec', 'language_info', 'widgets')}
        meta.setdefault('language_info', {'name': 'python', 'pygments_lexer': 'ipython3'})
        for i, cell in enumerate(new): cell['id'] = f'cell-{i}'  # nbformat 4.5 wants ids; stable ones
        out = {'cells': new, 'metadata': meta, 'nbformat': 4, 'nbformat_minor': 5}
        (dest / page.replace('.html', '.ipynb')).write_text(json.dumps(out, indent=1, ensure_ascii=False) + '\n',
                                                            encoding='utf-8')
    if with_toctree and 'index.html' not in site.pages:
        raise SystemExit("No home page: the site needs nbs/index.ipynb (output-file index.html).")
    return site


def readme_markdown(nb: dict) -> str:
    """GitHub-flavoured markdown for a notebook: markdown cells as they are, code cells (without `#|` lines;
    hidden and exported cells left out) as ```python blocks, and the plain-text result of each code cell."""
    fm, cells = front_matter(nb)
    parts = []
    if fm.get('title'): parts.append(f"# {fm['title']}" + (f"\n\n> {fm['description']}" if fm.get('description') else ''))
    for cell in cells:
        src = source(cell)
        if cell['cell_type'] == 'markdown':
            parts.append(src.strip())
            continue
        if cell['cell_type'] != 'code': continue
        directives, code = split_directives(src)
        if directives.keys() & {'hide', 'export', 'exporti'}: continue
        if code.strip(): parts.append(f"```python\n{code.strip()}\n```")
        for out in cell.get('outputs', []):
            text = out.get('data', {}).get('text/plain') if out.get('output_type') == 'execute_result' else None
            if text: parts.append("```\n" + source({'source': text}).strip() + "\n```")
    return '\n\n'.join(p for p in parts if p) + '\n'


def readme(settings, check: bool, dest: Path) -> int:
    "Write (or, with `check`, compare) the README generated from the home notebook."
    nb_path = ROOT / settings.get('nbs_path', 'nbs') / settings.get('readme_nb', 'index.ipynb')
    text = readme_markdown(json.loads(nb_path.read_text(encoding='utf-8')))
    if check:
        if not dest.exists() or dest.read_text(encoding='utf-8') != text:
            print(f"{dest.name} is out of date with {nb_path.relative_to(ROOT)}: run python tools/make_readme.py")
            return 1
        print(f"{dest.name} is up to date")
        return 0
    dest.write_text(text, encoding='utf-8')
    print(f"wrote {dest}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--src', type=Path, default=ROOT / '_proc', help="nbdev's processed notebooks")
    parser.add_argument('--dest', type=Path, default=ROOT / '_plain', help='where the plain notebooks go (emptied)')
    parser.add_argument('--toctree', action='store_true', help='add the hidden toctrees to the home page')
    parser.add_argument('--readme', nargs='?', const=ROOT / 'README.md', type=Path, default=None,
                        help='only write the README (default README.md), from nbs/index.ipynb')
    parser.add_argument('--check', action='store_true', help='with --readme: exit 1 if the README is out of date')
    parser.add_argument('-v', '--verbose', action='store_true', help='list links whose anchor has no entry')
    args = parser.parse_args(argv)
    settings = read_settings()
    if args.readme is not None or args.check: return readme(settings, args.check, args.readme or ROOT / 'README.md')
    prefix = settings.get('doc_host', '').rstrip('/') + '/' + settings.get('doc_baseurl', '').strip('/')
    prefix = prefix.rstrip('/') + '/' if settings.get('doc_host') else ''
    site = convert(args.src, args.dest, ROOT / settings.get('nbs_path', 'nbs'), prefix, args.toctree)
    print(f"converted {len(site.pages)} notebooks into {args.dest}"
          + (f"; {len(site.dropped)} links to symbols without an entry point to their page" if site.dropped else ''))
    if args.verbose:
        for url in sorted(set(site.dropped)): print('  ', url)
    return 0


if __name__ == '__main__': sys.exit(main())
