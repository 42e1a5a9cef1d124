"""``attnserve-export inspect DIR``: what a model directory holds (torch-free).

The manifest (read without hashing the files: inspecting a large or tampered directory
should still work; ``verify`` checks the hashes), each graph's inputs and outputs with
dtypes and shapes, attention nodes by op type, file sizes, and the saved export report's
verification summary.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx

from attnserve.contract.graph_io import STEP_ATTENTION
from attnserve.contract.manifest import load_manifest

from .onnx_nodes import count_attention_nodes, count_ops, describe_value
from .verify import REPORT_FILE

CONFIG_KEYS = {
    "translation": ("vocab_size", "d_model", "num_heads", "encoder_layers", "decoder_layers", "ffn_dim"),
    "image-classification": ("image_size", "patch_size", "num_classes", "dim", "depth", "num_heads", "keep_rate"),
}


def describe_model_dir(model_dir: Path | str) -> dict[str, Any]:
    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir, verify_files=False)
    graphs = {}
    for gname, spec in manifest.graphs.items():
        proto = onnx.load(str(model_dir / spec.file), load_external_data=False)
        nodes = count_attention_nodes(proto)
        softmax = count_ops(proto, "ai.onnx::Softmax")["ai.onnx::Softmax"]
        softmax -= sum(n.name == f"{STEP_ATTENTION}_softmax" for n in proto.graph.node)  # the step's output, no call
        if softmax:
            nodes["ai.onnx::Softmax"] = softmax
        graphs[gname] = {
            "file": spec.file,
            "inputs": [describe_value(v) for v in proto.graph.input],
            "outputs": [describe_value(v) for v in proto.graph.output],
            "attention_nodes": nodes,
            "nodes": len(proto.graph.node),
            "opset": {imp.domain or "ai.onnx": imp.version for imp in proto.opset_import},
        }
    summary: dict[str, Any] = {
        "name": manifest.name,
        "kind": manifest.kind,
        "attention": manifest.attention,
        "precision": manifest.precision,
        "opset": manifest.opset,
        "attnserve_version": manifest.attnserve_version,
        "config": {k: manifest.config[k] for k in CONFIG_KEYS[manifest.kind] if k in manifest.config},
        "graphs": graphs,
        "files": {name: entry.get("bytes") for name, entry in manifest.files.items()},
        "source": manifest.extra.get("source"),
    }
    if manifest.kind == "translation":
        summary["family"] = manifest.family
        summary["kv_cache"] = manifest.kv_cache
        summary["tokenizer"] = vars(manifest.tokenizer)
        summary["limits"] = manifest.limits
        summary["languages"] = vars(manifest.languages) if manifest.languages else None
        summary["vocabulary"] = _vocabulary(model_dir, manifest)
    else:
        summary["labels"] = {"count": len(manifest.labels), "first": manifest.labels[:5]}
        summary["preprocessing"] = vars(manifest.preprocessing)
    report = model_dir / REPORT_FILE
    if report.is_file():
        data = json.loads(report.read_text())
        checks = data.get("verification", {}).get("checks", [])
        summary["export_verification"] = {
            "passed": data.get("verification", {}).get("passed"),
            "checks": len(checks),
            "max_abs_diff": max((c["value"] for c in checks if c["name"].endswith("max abs diff")), default=None),
        }
    return summary


def _codes(codes: list[str], shown: int = 12) -> str:
    return ", ".join(codes[:shown]) + (f", ... ({len(codes) - shown} more)" if len(codes) > shown else "") or "-"


def _vocabulary(model_dir: Path, manifest) -> dict[str, Any]:
    """The model's vocabulary size, the tokenizer's, and its special tokens by role."""
    from tokenizers import Tokenizer

    tok = manifest.tokenizer
    out: dict[str, Any] = {"size": manifest.config.get("vocab_size")}
    try:
        tokenizer = Tokenizer.from_file(str(model_dir / tok.file))
    except Exception as exc:  # noqa: BLE001 - inspect reports what it can
        return out | {"error": f"{tok.file}: {exc}"}
    roles = {"pad": tok.pad_id, "start": tok.start_id, "end": tok.eos_id, "unknown": tok.unk_id}
    out["tokenizer_size"] = tokenizer.get_vocab_size(with_added_tokens=True)
    out["special"] = {role: f"{tokenizer.id_to_token(i)} ({i})" for role, i in roles.items()}
    out["never_generated"] = tok.never_generate
    return out


def format_description(summary: dict[str, Any]) -> str:
    lines = [
        f"{summary['name']}: {summary['kind']}, attention {summary['attention']}, precision {summary['precision']}, "
        f"opset {summary['opset']} (attnserve {summary['attnserve_version']})",
        "config: " + ", ".join(f"{k} {v}" for k, v in summary["config"].items()),
    ]
    if summary["kind"] == "translation":
        lines.append(f"family {summary['family']}; decoder KV cache {summary['kv_cache']}")
        vocab = summary["vocabulary"]
        special = ", ".join(f"{k} {v}" for k, v in vocab.get("special", {}).items())
        lines.append(f"vocabulary: {vocab['size']} ids (tokenizer {vocab.get('tokenizer_size', '?')}); {special}")
        languages = summary["languages"]
        if languages:
            lines.append(f"source languages ({len(languages['source'])}): {_codes(languages['source'])}")
            lines.append(f"target languages ({len(languages['target'])}): {_codes(languages['target'])}")
            defaults = {k: languages[k] for k in ("default_source", "default_target") if languages[k]}
            if defaults:
                lines.append("defaults: " + ", ".join(f"{k.removeprefix('default_')} {v}" for k, v in defaults.items()))
        else:
            lines.append("languages: one fixed pair (no language tokens)")
        tok = summary["tokenizer"]
        lines.append(
            f"tokenizer: {tok['file']} (pad {tok['pad_id']}, bos {tok['bos_id']}, eos {tok['eos_id']}, "
            f"unk {tok['unk_id']}); limits: " + ", ".join(f"{k} {v}" for k, v in summary["limits"].items())
        )
    else:
        pre = summary["preprocessing"]
        lines.append(
            f"labels: {summary['labels']['count']} ({', '.join(summary['labels']['first'])}, ...); "
            f"preprocessing: {pre['image_size']}px x {pre['channels']}, mean {pre['mean']}, std {pre['std']}"
        )
    if summary.get("source"):
        lines.append("source: " + ", ".join(f"{k} {v}" for k, v in summary["source"].items()))
    for gname, graph in summary["graphs"].items():
        nodes = ", ".join(f"{n} x {op}" for op, n in graph["attention_nodes"].items()) or "none"
        lines.append(f"graph {gname} ({graph['file']}, {graph['nodes']} nodes; attention nodes: {nodes}):")
        lines += [f"  in   {v}" for v in graph["inputs"]]
        lines += [f"  out  {v}" for v in graph["outputs"]]
    lines.append("files:")
    lines += [f"  {name:<22} {size / 1e6:10.2f} MB" for name, size in summary["files"].items() if size is not None]
    if "export_verification" in summary:
        v = summary["export_verification"]
        diff = "n/a" if v["max_abs_diff"] is None else f"{v['max_abs_diff']:.3g}"
        lines.append(f"export verification: passed {v['passed']}, {v['checks']} checks, max abs diff {diff}")
    return "\n".join(lines)
