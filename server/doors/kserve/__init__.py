"""KServe v2 (Open Inference Protocol) with Triton's extensions, on attnserve's models.

``tensors`` (the protocol's tensors and their byte layouts), ``infer`` (the tensor
conventions of each model kind, inference and decoupled streaming), ``describe``
(metadata, config, statistics, repository index) are shared by both transports:
``grpc_service`` (``inference.GRPCInferenceService`` on the gRPC port) and ``rest``
(the REST routes on the HTTP port, ``attnserve.server.doors.http``).
"""
