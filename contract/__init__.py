"""The model-directory contract: what ``attnserve.export`` writes and ``attnserve.server`` reads.

``model.json`` (:mod:`.manifest`: parsing, validation, writing, sha256 of every file), the
kinds, attention targets and precisions it may name (:mod:`.kinds`), the graphs' input
and output names (:mod:`.graph_io`) and an image model's preprocessing (:mod:`.images`).
Torch-free and server-free: the standard library, numpy, Pillow and tokenizers only, so both
sides import it and neither imports the other.
"""
