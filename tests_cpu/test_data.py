import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.core import data
from harness.core import tokenizer as tok
from harness.errors import BadInput


@pytest.fixture(scope="module")
def packed(fixture_corpus):
    return data.prepare(vocab_size=1024, seq_len=64, batch_size=8, corpus=fixture_corpus)


def test_tokenizer_round_trips_every_document(fixture_corpus, packed):
    for text, ids in zip(fixture_corpus.texts, packed.tokenizer.encode(fixture_corpus.texts)):
        assert packed.tokenizer.decode(ids) == text


def test_tokenizer_is_trained_once_and_then_read_from_cache(fixture_corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_CACHE", str(tmp_path))
    first = tok.trained_on(fixture_corpus.texts, fixture_corpus.fingerprint, 512)
    files = list((tmp_path / "tokenizers").iterdir())
    mtime = files[0].stat().st_mtime_ns
    second = tok.trained_on(fixture_corpus.texts, fixture_corpus.fingerprint, 512)
    assert [f.stat().st_mtime_ns for f in (tmp_path / "tokenizers").iterdir()] == [mtime]
    assert first.fingerprint == second.fingerprint and second.vocab_size == 512


def test_gpt2_style_tokenizer_files_are_used_when_given(fixture_corpus, packed, tmp_path):
    packed.tokenizer.tokenizer.model.save(str(tmp_path))  # writes vocab.json and merges.txt, as GPT-2 ships them
    assert sorted(p.name for p in tmp_path.iterdir()) == ["merges.txt", "vocab.json"]
    from_files = tok.from_files(tmp_path)
    sample = fixture_corpus.texts[3][:2000]
    assert from_files.decode(from_files.encode([sample])[0]) == sample
    assert from_files.encode([sample]) == packed.tokenizer.encode([sample])


def test_tokenizer_directory_without_files_is_rejected(tmp_path):
    with pytest.raises(BadInput, match="missing vocab.json"):
        tok.from_files(tmp_path)


def test_vocabulary_smaller_than_tokenizer_is_rejected(fixture_corpus, packed, tmp_path):
    packed.tokenizer.tokenizer.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(BadInput, match="model vocabulary 512 is smaller than the tokenizer's 1024"):
        data.prepare(512, 64, 8, fixture_corpus, tokenizer_dir=tmp_path)


def test_documents_are_separated_by_end_of_text(fixture_corpus, packed):
    stream = data.token_stream(fixture_corpus, packed.tokenizer)
    assert (stream == packed.tokenizer.eos_id).sum() == len(fixture_corpus.texts)
    assert stream[-1] == packed.tokenizer.eos_id


@settings(max_examples=200, deadline=None)
@given(stream=st.lists(st.integers(0, 50256), max_size=500), block_len=st.integers(1, 64))
def test_packing_loses_no_tokens(stream, block_len):
    stream = np.asarray(stream, dtype=np.int32)
    blocks = data.pack(stream, block_len)
    kept = blocks.size
    assert blocks.shape[1] == block_len
    assert np.array_equal(blocks.ravel(), stream[:kept])  # order kept, nothing inserted
    assert len(stream) - kept < block_len  # only a partial last block is dropped


def test_targets_are_inputs_shifted_by_one(packed):
    inputs, targets = packed.batch(step=5, batch_size=8, seed=0)
    assert inputs.shape == targets.shape == (8, 64)
    assert np.array_equal(inputs[:, 1:], targets[:, :-1])


def test_epoch_order_is_a_function_of_seed_and_epoch_only(packed):
    n, per_epoch = len(packed.blocks), packed.steps_per_epoch(8)
    one_epoch = np.concatenate([packed.batch(s, 8, seed=3)[0] for s in range(per_epoch)])
    assert len({row.tobytes() for row in one_epoch}) == len(one_epoch) == per_epoch * 8  # no repeats
    assert np.array_equal(packed.batch(per_epoch + 2, 8, seed=3)[0], packed.batch(per_epoch + 2, 8, seed=3)[0])
    assert not np.array_equal(data.epoch_order(n, 3, 0), data.epoch_order(n, 3, 1))
    assert not np.array_equal(data.epoch_order(n, 3, 0), data.epoch_order(n, 4, 0))
    assert np.array_equal(np.sort(data.epoch_order(n, 3, 1)), np.arange(n))


def test_corpus_too_small_for_one_batch_is_rejected(tmp_path):
    path = tmp_path / "tiny.jsonl"
    path.write_text('{"id": "1", "url": "u", "title": "t", "text": "A single short sentence of text."}\n')
    corpus = data.load_corpus(path)
    with pytest.raises(BadInput, match="fewer than one batch of 8"):
        data.prepare(300, 16, 8, corpus)
