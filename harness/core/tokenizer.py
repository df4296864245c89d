"""Tokenizer: GPT-2's own BPE files when the user has them, else a byte-level BPE trained on the corpus.

Training happens once per (corpus, vocabulary size) and the result is cached as tokenizer.json,
as Alpa's run_clm_flax example trains its tokenizer on the dataset itself (docs/paper.md, "Likely setup").
"""
import hashlib
from dataclasses import dataclass
from pathlib import Path

import tokenizers
from tokenizers import ByteLevelBPETokenizer, Tokenizer

from harness.cache import atomic_write, cache_dir
from harness.errors import BadInput

EOS = "<|endoftext|>"


@dataclass
class LoadedTokenizer:
    tokenizer: Tokenizer | ByteLevelBPETokenizer  # both have the methods used below
    description: str  # where it came from, for result records
    fingerprint: str  # changes whenever the token ids could change

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def eos_id(self) -> int:
        return self.tokenizer.token_to_id(EOS)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)


def from_files(directory: str | Path) -> LoadedTokenizer:
    """GPT-2's vocab.json + merges.txt (as published with the model), or a tokenizer.json."""
    directory = Path(directory)
    if (directory / "tokenizer.json").is_file():
        tok = Tokenizer.from_file(str(directory / "tokenizer.json"))
    else:
        vocab, merges = directory / "vocab.json", directory / "merges.txt"
        for f in (vocab, merges):
            if not f.is_file():
                raise BadInput(f"tokenizer directory {directory}: missing {f.name} "
                               "(expected GPT-2's vocab.json and merges.txt, or a tokenizer.json)")
        tok = ByteLevelBPETokenizer(str(vocab), str(merges))
    if tok.token_to_id(EOS) is None:
        raise BadInput(f"tokenizer in {directory} has no {EOS} token, which separates documents")
    digest = hashlib.sha256(tok.to_str().encode()).hexdigest()[:16]
    return LoadedTokenizer(tok, f"files:{directory}", digest)


def trained_on(texts: list[str], corpus_fingerprint: str, vocab_size: int) -> LoadedTokenizer:
    """A byte-level BPE with up to vocab_size tokens trained on texts, cached by corpus and size.

    A small corpus runs out of merges before vocab_size; the tokenizer then has fewer tokens,
    which the model tolerates (unused embedding rows), and the record shows the real size.
    """
    key = f"bpe-{corpus_fingerprint}-v{vocab_size}-tok{tokenizers.__version__}"
    path = cache_dir("tokenizers") / f"{key}.json"
    if not path.exists():
        bpe = ByteLevelBPETokenizer()
        bpe.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2,
                                special_tokens=[EOS], show_progress=False)
        atomic_write(path, lambda tmp: bpe.save(str(tmp)))
    return LoadedTokenizer(Tokenizer.from_file(str(path)), f"bpe-trained:{vocab_size}", key)
