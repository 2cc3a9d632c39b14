"""Loaded at the start of every Python process run with tests.corpus.pathwatch.watch_env: installs the recorder."""
from tests.corpus.pathwatch import install_from_env

install_from_env()
