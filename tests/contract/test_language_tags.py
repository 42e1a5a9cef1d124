"""Which of a model's codes a request's code names (``attnserve.contract.language_tags``): Argos
Translate's ``pb`` / ``zt`` read as LibreTranslate's ``pt-BR`` / ``zh-Hant``, DeepL's upper-case
variants, NLLB's ``zho_Hant``; a variant before the plain code, never a contradicting one."""

from __future__ import annotations

import pytest

from attnserve.contract.language_tags import matches, standard


@pytest.mark.parametrize(
    ("code", "spelled"),
    [("pb", "pt-BR"), ("zt", "zh-Hant"), ("ZT", "zh-Hant"), ("zho_Hant", "zh-Hant"), ("zho_Hans", "zh-Hans"),
     ("deu_Latn", "de"), ("fra", "fr"), ("EN-US", "en-US"), ("x!", None)],
)  # fmt: skip
def test_the_standard_spelling_of_a_code(code, spelled):
    assert standard(code) == spelled


@pytest.mark.parametrize(
    ("code", "codes", "found"),
    [
        # an exact code, and the same tag in any spelling
        ("pb", ["pt", "pb"], ["pb"]), ("PT-BR", ["pt", "pb"], ["pb"]), ("pt-br", ["pb"], ["pb"]),
        ("ZH-HANT", ["zh", "zt"], ["zt"]), ("zh-Hant", ["zho_Hans", "zho_Hant"], ["zho_Hant"]),
        ("de", ["deu_Latn", "fra_Latn"], ["deu_Latn"]), ("pt-BR", ["pt-BR"], ["pt-BR"]),
        # a bare code: the plain one, else its likely script's, else the only variant
        ("pt", ["pt", "pb"], ["pt"]), ("zh", ["zh", "zt"], ["zh"]), ("ZH", ["zt"], ["zt"]), ("PT", ["pb"], ["pb"]),
        ("zh", ["zho_Hans", "zho_Hant"], ["zho_Hans"]), ("pt", ["pb", "pt_PT"], ["pb", "pt_PT"]),
        # a region or script: the plain code where no variant is that one; never a contradicting variant
        ("EN-US", ["en", "de"], ["en"]), ("EN-GB", ["en"], ["en"]), ("PT-PT", ["pt", "pb"], ["pt"]),
        ("pt-BR", ["pt"], ["pt"]), ("zh-TW", ["zh", "zt"], ["zt"]), ("ZH-HANS", ["zh", "zt"], ["zh"]),
        ("zh-Hant", ["zh"], []), ("ZH-HANS", ["zt"], []), ("PT-PT", ["pb"], []), ("sr-Latn", ["sr"], []),
        # not a tag: only itself
        ("my-model-lang", ["my-model-lang"], ["my-model-lang"]), ("x!", ["en"], []), ("", ["en"], []),
    ],
)  # fmt: skip
def test_a_code_names_the_codes_a_libretranslate_or_deepl_user_means(code, codes, found):
    assert matches(code, codes) == found
