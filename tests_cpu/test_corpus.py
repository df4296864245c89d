"""The Hugging Face `datasets` loading path, exercised on local files in the hub's schema."""
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.core import data
from harness.errors import BadInput

CARD = """---
configs:
- config_name: 20231101.ace
  data_files:
  - split: train
    path: 20231101.ace/train-*
---
"""
ROWS = [
    {"id": "1", "url": "https://ace.wikipedia.org/wiki?curid=1", "title": "Aceh",
     "text": "Aceh nakeuh saboh provinsi di Indonesia."},
    {"id": "2", "url": "https://ace.wikipedia.org/wiki?curid=2", "title": "Banda Aceh",
     "text": "Banda Aceh nakeuh ibukota provinsi Aceh."},
]


def hub_repo(root, rows, columns=("id", "url", "title", "text")):
    """A local directory laid out exactly like the hub repository wikimedia/wikipedia."""
    (root / "20231101.ace").mkdir(parents=True)
    (root / "README.md").write_text(CARD)
    table = pa.Table.from_pylist([{c: r[c] for c in columns} for r in rows])
    pq.write_table(table, root / "20231101.ace" / "train-00000-of-00001.parquet")
    return root


def test_local_repository_in_hub_layout_loads_through_datasets(tmp_path):
    corpus = data.load_corpus(hub_repo(tmp_path / "wikipedia", ROWS), "20231101.ace")
    assert corpus.texts == [r["text"] for r in ROWS]
    assert corpus.description.endswith("wikipedia (20231101.ace)")


def test_fixture_corpus_is_real_wikipedia_in_the_hub_schema(fixture_corpus):
    import datasets

    ds = datasets.load_dataset(str(data.FIXTURE_CORPUS), data.FIXTURE_CONFIG, split="train")
    assert ds.column_names == ["id", "url", "title", "text"]
    assert len(fixture_corpus.texts) == ds.num_rows > 100
    assert "Anarchism" in ds["title"] and all(u.startswith("https://en.wikipedia.org/") for u in ds["url"])
    assert 2e6 < sum(map(len, fixture_corpus.texts)) < 5e6  # a few MB, as the fixture promises


def test_single_jsonl_file_loads(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert data.load_corpus(path).texts == [r["text"] for r in ROWS]


def test_corpus_without_text_column_is_rejected(tmp_path):
    repo = hub_repo(tmp_path / "wikipedia", ROWS, columns=("id", "url", "title"))
    with pytest.raises(BadInput, match=r"has no 'text' column \(columns: id, url, title"):
        data.load_corpus(repo, "20231101.ace")


def test_missing_corpus_path_is_rejected():
    with pytest.raises(BadInput, match="corpus path ./no/such/dir does not exist"):
        data.load_corpus("./no/such/dir")


def test_unknown_config_is_rejected(tmp_path):
    with pytest.raises(BadInput, match="corpus .*20991231.xx"):
        data.load_corpus(hub_repo(tmp_path / "wikipedia", ROWS), "20991231.xx")


def test_unreachable_hub_gives_one_line_error(tmp_path):
    """The paper's corpus through the hub, offline and uncached: one line naming it, exit 2."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run([sys.executable, "-m", "harness", "train", "--corpus", data.PAPER_CORPUS,
                           "--corpus-config", data.PAPER_CONFIG], env=env, capture_output=True, text=True)
    assert proc.returncode == 2
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("harness: error: corpus wikimedia/wikipedia: not a local path and the Hugging Face hub")
