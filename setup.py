# All settings live in settings.ini; edit there, not here.
# This is nbdev's setup.py template, with `packaging.version` in place of the removed `pkg_resources`,
# and one extra per `<name>_requirements` key in settings.ini.
from configparser import ConfigParser
import setuptools
from packaging.version import parse as parse_version

assert parse_version(setuptools.__version__) >= parse_version('36.2')

config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

expected = ('version description keywords author author_email lib_name user branch license status '
            'min_python audience language').split()
for o in expected: assert o in cfg, f"missing expected setting: {o}"
setup_cfg = {o: cfg[o] for o in 'version description keywords author author_email'.split()}

licenses = {
    'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License'),
    'mit': ('MIT License', 'OSI Approved :: MIT License'),
}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
py_versions = '3.10 3.11 3.12 3.13 3.14'.split()

requirements = cfg.get('requirements', '').split()
extras = {key[:-len('_requirements')]: cfg[key].split()
          for key in cfg if key.endswith('_requirements') and key != 'pip_requirements'}
lic = licenses.get(cfg['license'].lower(), (cfg['license'], None))
min_python = cfg['min_python']
dev_requirements = extras.get('dev', [])

setuptools.setup(
    name=cfg['lib_name'],
    license=lic[0],
    classifiers=['Development Status :: ' + statuses[int(cfg['status'])],
                 'Intended Audience :: ' + cfg['audience'].title(),
                 'Natural Language :: ' + cfg['language'].title()]
                + ['Programming Language :: Python :: ' + o for o in py_versions[py_versions.index(min_python):]]
                + (['License :: ' + lic[1]] if lic[1] else []),
    url=cfg['git_url'],
    packages=setuptools.find_packages(include=['trainer_nb', 'trainer_nb.*']),
    include_package_data=True,
    install_requires=requirements,
    extras_require=extras,
    python_requires='>=' + cfg['min_python'],
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d']},
    **setup_cfg)
