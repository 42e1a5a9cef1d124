"""``attnserve-export pull``: download models (Hugging Face Hub ids, Argos Translate packages from
the Argos index), import them like ``--from-hf`` / ``--from-hf-vit`` / ``--from-argos``, verify them
and install them into a model repository.

- :mod:`.download`: one file over HTTP (or from a local mirror), resumable, checksummed;
- :mod:`.argos_index`: the Argos package index and the pairs a language list selects;
- :mod:`.hub`: a Hub snapshot with only the files the importers read;
- :mod:`.install`: import, export and install one model, written aside and renamed into place;
- :mod:`.command`: the subcommand's flags and its run.

Nothing here runs in the server: it never downloads, it picks up what ``pull`` installed.
"""
