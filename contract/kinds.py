"""The closed vocabularies of ``model.json``: model kinds, attention targets, precisions."""

from __future__ import annotations

TRANSLATION = "translation"
IMAGE_CLASSIFICATION = "image-classification"
KINDS = (TRANSLATION, IMAGE_CLASSIFICATION)

# The graphs a model directory of each kind holds, by role.
GRAPHS_BY_KIND = {TRANSLATION: ("encoder", "decoder"), IMAGE_CLASSIFICATION: ("model",)}
# Graphs a directory may hold besides those: a translation model's aligner.onnx (word
# alignments from cross-attention, issue 34); directories exported before it lack it.
OPTIONAL_GRAPHS = {TRANSLATION: ("aligner",), IMAGE_CLASSIFICATION: ()}

# How attention was emitted (one node per attention call, except "decomposed"):
# "fused" = com.microsoft::MultiHeadAttention (onnxruntime's fused kernels, the default),
# "onnx" = the standard ONNX Attention op (opset 23), "decomposed" = MatMul/Softmax.
ATTENTION_TARGETS = ("fused", "onnx", "decomposed")

PRECISIONS = ("fp32", "fp16", "int8")

# Pillow resampling filters an image-classification model may ask for.
RESAMPLE = ("nearest", "bilinear", "bicubic", "lanczos")
