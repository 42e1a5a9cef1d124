"""The DeepL door's rows of the OpenAPI document (``openapi.py``), whose errors are DeepL's
``{"message": ...}`` rather than ``{"error": ...}`` (``deepl_routes``): its v2 API and its v3
glossaries; and those of attnserve's own stored-glossary routes (``glossary_routes``)."""

from __future__ import annotations

from typing import Any

TEXTS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(name: str) -> dict[str, Any]:
    return {"application/json": {"schema": _ref(name)}}


def _form_or_json(name: str) -> dict[str, Any]:
    return {kind: {"schema": _ref(name)} for kind in ("application/json", "application/x-www-form-urlencoded")}


SCHEMAS: dict[str, Any] = {
    "DeepLTranslateRequest": {
        "type": "object",
        "required": ["text", "target_lang"],
        "properties": {
            "text": TEXTS,
            "target_lang": {
                "type": "string",
                "description": "DE, EN-US, PT-BR, ZH-HANT, ... (a variant reaches its own model, else the plain one)",
            },
            "source_lang": {"type": "string", "description": "absent: detected"},
            "tag_handling": {"type": "string", "enum": ["html", "xml"]},
            **{
                name: {**TEXTS, "description": f"tags, comma-separated or a list: {words}"}
                for name, words in (
                    ("ignore_tags", "their content is not translated"),
                    ("splitting_tags", "they end a sentence"),
                    ("non_splitting_tags", "they never end a sentence"),
                )
            },
            "outline_detection": {
                "oneOf": [{"type": "boolean"}, {"type": "string"}],
                "description": "xml: 0 or false, only splitting_tags end a sentence",
            },
            "glossary_id": {"type": "string"},
            "split_sentences": {"type": "string", "enum": ["0", "1", "nonewlines"]},
            "preserve_formatting": {"oneOf": [{"type": "boolean"}, {"type": "string"}]},
        },
        "additionalProperties": True,
    },
    "DeepLTranslateReply": {
        "type": "object",
        "properties": {"translations": {"type": "array", "items": {"type": "object"}}},
    },
    "DeepLGlossaryRequest": {
        "type": "object",
        "required": ["name", "source_lang", "target_lang", "entries"],
        "properties": {
            "name": {"type": "string"},
            "source_lang": {"type": "string"},
            "target_lang": {"type": "string"},
            "entries": {"type": "string", "description": "source<TAB>target lines, or CSV rows"},
            "entries_format": {"type": "string", "enum": ["tsv", "csv"]},
        },
    },
    "DeepLGlossary": {
        "type": "object",
        "properties": {
            "glossary_id": {"type": "string"},
            "name": {"type": "string"},
            "ready": {"type": "boolean"},
            "source_lang": {"type": "string"},
            "target_lang": {"type": "string"},
            "creation_time": {"type": "string"},
            "entry_count": {"type": "integer"},
        },
    },
    "DeepLDictionaryEntries": {
        "type": "object",
        "required": ["source_lang", "target_lang", "entries"],
        "properties": {
            "source_lang": {"type": "string"},
            "target_lang": {"type": "string"},
            "entries": {"type": "string", "description": "source<TAB>target lines, or CSV rows"},
            "entries_format": {"type": "string", "enum": ["tsv", "csv"]},
        },
    },
    "DeepLV3GlossaryRequest": {
        "type": "object",
        "description": "create: both; edit (PATCH): a new name and / or dictionaries whose entries are merged",
        "properties": {
            "name": {"type": "string"},
            "dictionaries": {"type": "array", "items": _ref("DeepLDictionaryEntries")},
        },
    },
    "DeepLDictionary": {
        "type": "object",
        "properties": {
            "source_lang": {"type": "string"},
            "target_lang": {"type": "string"},
            "entry_count": {"type": "integer"},
        },
    },
    "DeepLV3Glossary": {
        "type": "object",
        "properties": {
            "glossary_id": {"type": "string"},
            "name": {"type": "string"},
            "dictionaries": {"type": "array", "items": _ref("DeepLDictionary")},
            "creation_time": {"type": "string"},
        },
    },
    "DeepLDocumentForm": {
        "type": "object",
        "required": ["file", "target_lang"],
        "properties": {
            "file": {"type": "string", "contentMediaType": "application/octet-stream"},
            "target_lang": {"type": "string"},
            "source_lang": {"type": "string"},
            "glossary_id": {"type": "string", "description": "a stored glossary of the key (needs source_lang)"},
        },
    },
    "GlossaryRequest": {
        "type": "object",
        "required": ["name", "source", "target", "entries"],
        "properties": {
            "name": {"type": "string"},
            "source": {"type": "string"},
            "target": {"type": "string"},
            "entries": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "DeepLDocumentKey": {"type": "object", "properties": {"document_key": {"type": "string"}}},
}

BINARY = {"application/octet-stream": {"schema": {"type": "string", "contentMediaType": "application/octet-stream"}}}
TSV = {"text/tab-separated-values": {"schema": {"type": "string"}}}

OPERATIONS: list[tuple] = [
    ("POST", "/v2/translate", "deepl", "translate texts", _form_or_json("DeepLTranslateRequest"), 200,
     _json("DeepLTranslateReply")),
    ("GET", "/v2/languages", "deepl", "source or target languages (type)", None, 200, _json("Object")),
    ("POST", "/v2/languages", "deepl", "source or target languages (type)", None, 200, _json("Object")),
    ("GET", "/v2/usage", "deepl", "the key's characters this month and its quota", None, 200, _json("Object")),
    ("POST", "/v2/usage", "deepl", "the key's characters this month and its quota", None, 200, _json("Object")),
    ("GET", "/v2/glossary-language-pairs", "deepl", "pairs a glossary may be made for", None, 200, _json("Object")),
    ("POST", "/v2/glossaries", "deepl", "create a glossary", _form_or_json("DeepLGlossaryRequest"), 201,
     _json("DeepLGlossary")),
    ("GET", "/v2/glossaries", "deepl", "the key's glossaries", None, 200, _json("Object")),
    ("GET", "/v2/glossaries/{id}", "deepl", "a glossary", None, 200, _json("DeepLGlossary")),
    ("DELETE", "/v2/glossaries/{id}", "deepl", "delete a glossary", None, 204, None),
    ("GET", "/v2/glossaries/{id}/entries", "deepl", "a glossary's entries as TSV", None, 200, TSV),
    ("POST", "/v3/glossaries", "deepl", "create a glossary of a dictionary per language pair",
     _json("DeepLV3GlossaryRequest"), 201, _json("DeepLV3Glossary")),
    ("GET", "/v3/glossaries", "deepl", "the key's glossaries (v2 ones as one dictionary)", None, 200, _json("Object")),
    ("GET", "/v3/glossaries/{id}", "deepl", "a glossary and its dictionaries", None, 200, _json("DeepLV3Glossary")),
    ("PATCH", "/v3/glossaries/{id}", "deepl", "rename a glossary, merge entries into its dictionaries",
     _json("DeepLV3GlossaryRequest"), 200, _json("DeepLV3Glossary")),
    ("DELETE", "/v3/glossaries/{id}", "deepl", "delete a glossary", None, 204, None),
    ("PUT", "/v3/glossaries/{id}/dictionaries", "deepl", "replace (or add) the dictionary of a pair",
     _json("DeepLDictionaryEntries"), 200, _json("DeepLDictionary")),
    ("DELETE", "/v3/glossaries/{id}/dictionaries", "deepl", "delete the dictionary of source_lang, target_lang",
     None, 204, None),
    ("GET", "/v3/glossaries/{id}/entries", "deepl", "the entries of the dictionary of source_lang, target_lang",
     None, 200, _json("Object")),
    ("POST", "/v2/document", "deepl", "upload a document: a file job",
     {"multipart/form-data": {"schema": _ref("DeepLDocumentForm")}}, 200, _json("Object")),
    ("POST", "/v2/document/{id}", "deepl", "a document's status", _form_or_json("DeepLDocumentKey"), 200,
     _json("Object")),
    ("POST", "/v2/document/{id}/result", "deepl", "a translated document (503 until done)",
     _form_or_json("DeepLDocumentKey"), 200, BINARY),
    ("POST", "/glossaries", "glossaries", "store a glossary (attnserve's API)", _json("GlossaryRequest"), 201,
     _json("Object")),
    ("GET", "/glossaries", "glossaries", "the token's stored glossaries", None, 200, _json("Object")),
    ("GET", "/glossaries/{id}", "glossaries", "a stored glossary with its entries", None, 200, _json("Object")),
    ("DELETE", "/glossaries/{id}", "glossaries", "delete a stored glossary", None, 204, None),
]  # fmt: skip
