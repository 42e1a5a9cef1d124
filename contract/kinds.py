"""The closed vocabularies of ``model.json``: model kinds, attention targets, precisions."""

from __future__ import annotations

TRANSLATION = "translation"
IMAGE_CLASSIFICATION = "image-classification"
KINDS = (TRANSLATION, IMAGE_CLASSIFICATION)

# The graphs a model directory of each kind holds, by role.
GRAPHS_BY_KIND = {TRANSLATION: ("encoder", "decoder"), IMAGE_CLASSIFICATION: ("model",)}
# Graphs a directory may hold besides those: a translation model's aligner.onnx (word
# alignments from cross-attention); a directory without it serves no alignments.
OPTIONAL_GRAPHS = {TRANSLATION: ("aligner",), IMAGE_CLASSIFICATION: ()}

# How attention was emitted (one node per attention call, except "decomposed"):
# "fused" = com.microsoft::MultiHeadAttention (onnxruntime's fused kernels, the default),
# "onnx" = the standard ONNX Attention op (opset 23), "decomposed" = MatMul/Softmax.
ATTENTION_TARGETS = ("fused", "onnx", "decomposed")

PRECISIONS = ("fp32", "fp16", "int8")

# How a translation decoder keeps its self-attention cache (``model.json`` ``kv_cache``):
# "left-padded" = one (B, H, P, D) past per layer, every row left-padded to the longest and masked
# (``self_mask``); MultiHeadAttention returns present = past + new, a new tensor every step. The
# layout of directories written before the field existed, and the default when it is absent.
# "in-place" = one (B, H, capacity, D) buffer per layer and kind, row r's tokens in columns
# 0..seqlens_k[r] - 1; com.microsoft::GroupQueryAttention writes the new token at column
# seqlens_k[r] of the buffer bound as both past and present, and attends over that row only.
LEFT_PADDED, IN_PLACE = "left-padded", "in-place"
KV_CACHE_LAYOUTS = (LEFT_PADDED, IN_PLACE)

# Pillow resampling filters an image-classification model may ask for.
RESAMPLE = ("nearest", "bilinear", "bicubic", "lanczos")
