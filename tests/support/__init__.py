"""Helpers shared by test modules of several folders; a test module never imports another.

- ``tests.support.server``: ``ServerProcess`` (``attnserve-server`` as a child process) and
  ``direct_probs`` (what a classifier must answer, from onnxruntime in process);
- ``tests.support.hf_checkpoints``: tiny Hugging Face checkpoints in the hub's layouts (imports
  torch and transformers);
- ``tests.support.stand_ins``: local HTTP stand-ins of the Hugging Face Hub's file endpoints
  (``HubStandIn``, for ``HF_ENDPOINT``) and of a file server with failures on demand
  (``FileStandIn``: an Argos index and its packages, a 404, a body cut short);
- ``tests.support.tiers``: which tier a test belongs to (used by ``tests/conftest.py``);
- ``tests.support.sessions``: ``BindingSpy``, for session wrappers that see an in-place decoder's
  io-binding steps; ``DeviceSession``, a CPU session whose io binding copies host inputs when
  they are bound, as onnxruntime does for a device.
"""
