"""PyTorch -> ONNX model directories for attnserve (graphs, model.json, verification, CLI)."""
