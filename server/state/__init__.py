"""The server's state shared by its processes and replicas: one records store
(``database.Database``: SQLite in ``--state-dir``, or PostgreSQL at ``--state-url``) and the
records kept in it (``glossaries``: stored glossaries and their dictionaries; the file jobs' records,
``files/job_store.py``)."""

from .database import Database, StateStoreError, StoreUnavailable, open_database
from .glossaries import Dictionary, Glossary, GlossaryStore, with_dictionaries

__all__ = [
    "Database",
    "Dictionary",
    "Glossary",
    "GlossaryStore",
    "StateStoreError",
    "StoreUnavailable",
    "open_database",
    "with_dictionaries",
]
