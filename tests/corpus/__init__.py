"""A generated corpus of bad inputs (issue #9): see build_corpus.py."""
