"""Progress on stderr: a live bar on a terminal, a plain line every tenth of the run otherwise."""
import sys

from tqdm import tqdm


class Progress:
    def __init__(self, total: int, label: str, stream=None):
        self.total, self.label = total, label
        self.stream = stream or sys.stderr
        self.bar = None
        if self.stream.isatty():
            self.bar = tqdm(total=total, desc=label, file=self.stream, leave=False)
        self.every = max(1, total // 10)

    def update(self, done: int, **stats) -> None:
        text = " ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in stats.items())
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            self.bar.set_postfix_str(text, refresh=False)
        elif done == 1 or done % self.every == 0 or done == self.total:
            print(f"{self.label} {done}/{self.total} {text}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def say(line: str) -> None:
    """One line of progress on stderr (stdout is kept for --json)."""
    print(line, file=sys.stderr, flush=True)
