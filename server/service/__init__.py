"""The services behind every door: one for translation, one for image classification.

A door builds a canonical request (``requests``) and awaits a service; the service owns, once
for every door, what no door repeats: model resolution and language routing
(``routing``, one documented policy; ``languages``: a request's languages on one model;
``detection``: ``auto``), the limits, the text format and the decoding options (checked once
into the ``ValidTranslation`` the engine trusts), documents (``documents``: split by the
request's source language on the bounded work pool), the deadline (one ``Deadline``, handed
to the engine and awaited here), and the call's bookkeeping and metrics.
"""
