"""Corpus -> tokens -> fixed-length blocks -> batches, deterministic in (seed, epoch, step).

The paper trained on Hugging Face's `wikimedia/wikipedia`, config `20231101.ace`. That loader is
used as is when the hub (or its cache) is reachable; the embedded default is the fixture corpus
in the same schema and layout, read by the same `datasets.load_dataset` call.

Packing follows run_clm_flax's group_texts: documents are tokenized, joined (here with an
end-of-text token between documents), and cut into blocks; the remainder is dropped. A block
holds seq_len + 1 tokens so that inputs and targets are the block shifted by one.
"""
import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness import resources
from harness.cache import atomic_write, cache_dir
from harness.core import tokenizer as tok
from harness.errors import BadInput

FIXTURE_CORPUS = resources.path("wikipedia")
FIXTURE_CONFIG = "sample.en"
PAPER_CORPUS, PAPER_CONFIG = "wikimedia/wikipedia", "20231101.ace"
SCHEMA = ("id", "url", "title", "text")
LOCAL_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


@dataclass
class Corpus:
    source: str
    config: str | None
    texts: list[str]
    fingerprint: str  # hash of the texts: tokenizer and token caches are keyed by it

    @property
    def description(self) -> str:
        return f"{self.source} ({self.config})" if self.config else self.source


def load_corpus(source: str | Path | None = None, config: str | None = None) -> Corpus:
    """Load the train split of a corpus in the Wikipedia schema.

    source: None for the fixture corpus; a local directory laid out like a hub dataset
    repository, or a single .parquet/.jsonl/.json/.csv file; or a hub id such as
    'wikimedia/wikipedia' (with config '20231101.ace').
    """
    import datasets  # deferred: datasets is heavy, and loads only when a corpus is read

    if source is None:
        source, config = FIXTURE_CORPUS, config or FIXTURE_CONFIG
    path = Path(source).expanduser()
    if path.is_file():
        if path.suffix not in LOCAL_FORMATS:
            raise BadInput(f"corpus file {path}: expected one of {', '.join(LOCAL_FORMATS)}, got {path.suffix!r}")
        load = lambda: datasets.load_dataset(LOCAL_FORMATS[path.suffix], data_files=str(path), split="train",
                                             cache_dir=_local_cache(path))
    elif path.is_dir():
        load = lambda: datasets.load_dataset(str(path), config, split="train", cache_dir=_local_cache(path))
    elif HUB_ID.match(str(source)):
        load = lambda: datasets.load_dataset(str(source), config, split="train")
    else:
        raise BadInput(f"corpus path {source} does not exist (expected a directory or file in the "
                       f"{'/'.join(SCHEMA)} schema, or a hub id such as {PAPER_CORPUS})")
    try:
        dataset = load()
    except ConnectionError as e:
        raise BadInput(f"corpus {source}: not a local path and the Hugging Face hub is unreachable "
                       f"with no cached copy ({e}); pass a local corpus instead") from None
    except ValueError as e:  # unknown config name, unreadable files
        raise BadInput(f"corpus {source}: {str(e).splitlines()[0]}") from None
    if "text" not in dataset.column_names:
        raise BadInput(f"corpus {source} has no 'text' column (columns: {', '.join(dataset.column_names)}; "
                       f"expected the {'/'.join(SCHEMA)} schema)")
    texts = [t for t in dataset["text"] if t]
    if not texts:
        raise BadInput(f"corpus {source}: the 'text' column is empty")
    digest = hashlib.sha256()
    for t in texts:
        digest.update(t.encode())
        digest.update(b"\0")
    # The shipped sample is named the same wherever the package lives (checkout or site-packages).
    home = resources.path().parent.parent
    shown = path.resolve().relative_to(home) if path.resolve().is_relative_to(home) else source
    return Corpus(str(shown), config, texts, digest.hexdigest()[:16])


def _local_cache(path: Path) -> str:
    """A datasets cache of its own for each state of a local corpus.

    datasets keys the cache of a local directory by its name and config, so two corpora in
    folders of the same name, or a corpus edited in place, would read each other's stale
    tables; keying by every file's path, size and mtime makes that impossible.
    """
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    digest = hashlib.sha256(str(path.resolve()).encode())
    for f in files:
        st = f.stat()
        digest.update(f"{f}:{st.st_size}:{st.st_mtime_ns}".encode())
    return str(cache_dir("datasets") / digest.hexdigest()[:16])


def token_stream(corpus: Corpus, tokenizer: tok.LoadedTokenizer) -> np.ndarray:
    """All documents tokenized and joined, each followed by end-of-text; cached on disk."""
    path = cache_dir("tokens") / f"{corpus.fingerprint}-{tokenizer.fingerprint}.npy"
    if path.exists():
        return np.load(path)
    eos = tokenizer.eos_id
    ids = tokenizer.encode(corpus.texts)
    stream = np.fromiter((t for doc in ids for t in (*doc, eos)), dtype=np.int32)
    atomic_write(path, lambda tmp: np.save(open(tmp, "wb"), stream))
    return stream


def pack(stream: np.ndarray, block_len: int) -> np.ndarray:
    """[n_blocks, block_len] from consecutive tokens; the last partial block is dropped."""
    n_blocks = len(stream) // block_len
    return stream[: n_blocks * block_len].reshape(n_blocks, block_len)


@functools.lru_cache(maxsize=4)
def epoch_order(n_blocks: int, seed: int, epoch: int) -> np.ndarray:
    """The order of blocks in an epoch: a function of the seed and the epoch, nothing else."""
    return np.random.default_rng([seed, epoch]).permutation(n_blocks)


@dataclass
class PackedCorpus:
    corpus: Corpus
    tokenizer: tok.LoadedTokenizer
    blocks: np.ndarray  # int32 [n_blocks, seq_len + 1]

    @property
    def seq_len(self) -> int:
        return self.blocks.shape[1] - 1

    def steps_per_epoch(self, batch_size: int) -> int:
        return len(self.blocks) // batch_size  # a partial last batch is dropped, as in run_clm_flax

    def batch(self, step: int, batch_size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """(inputs, targets) of a global step; epochs follow each other, each freshly shuffled."""
        per_epoch = self.steps_per_epoch(batch_size)
        epoch, i = divmod(step, per_epoch)
        rows = self.blocks[epoch_order(len(self.blocks), seed, epoch)[i * batch_size:(i + 1) * batch_size]]
        return rows[:, :-1], rows[:, 1:]


def held_out(packed: PackedCorpus, fraction: float, batch_size: int) -> tuple[PackedCorpus, PackedCorpus]:
    """(train, held out): the last `fraction` of the blocks held out, whole batches of batch_size
    of them, never trained on. The blocks follow the corpus's order, so only the document that
    straddles the cut has tokens on both sides."""
    if not 0 < fraction < 1:
        raise BadInput(f"held-out fraction must be between 0 and 1, got {fraction}")
    held = int(len(packed.blocks) * fraction) // batch_size * batch_size
    if held < batch_size or len(packed.blocks) - held < batch_size:
        raise BadInput(f"corpus {packed.corpus.description}: {len(packed.blocks)} blocks cannot give a held-out "
                       f"{fraction:g} of whole batches of {batch_size} and a batch to train on")
    cut = len(packed.blocks) - held
    return (PackedCorpus(packed.corpus, packed.tokenizer, packed.blocks[:cut]),
            PackedCorpus(packed.corpus, packed.tokenizer, packed.blocks[cut:]))


def prepare(vocab_size: int, seq_len: int, batch_size: int, corpus: Corpus | None = None,
            tokenizer_dir: str | Path | None = None) -> PackedCorpus:
    """Load (or reuse) a corpus, get its tokenizer, tokenize, pack; check sizes against the model."""
    corpus = corpus or load_corpus()
    if tokenizer_dir is not None:
        tokenizer = tok.from_files(tokenizer_dir)
    else:
        tokenizer = tok.trained_on(corpus.texts, corpus.fingerprint, vocab_size)
    if tokenizer.vocab_size > vocab_size:
        raise BadInput(f"model vocabulary {vocab_size} is smaller than the tokenizer's {tokenizer.vocab_size}")
    blocks = pack(token_stream(corpus, tokenizer), seq_len + 1)
    if len(blocks) < batch_size:
        raise BadInput(f"corpus {corpus.description} packs into {len(blocks)} blocks of {seq_len + 1} tokens, "
                       f"fewer than one batch of {batch_size}")
    return PackedCorpus(corpus, tokenizer, blocks)
