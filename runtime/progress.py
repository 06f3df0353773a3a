"""What the Trainer reports while it runs: a Progress record on the PROGRESS_LOGGER logger, about
once a second (trainer_module/actions.py). A console draws them (pipeline/local/console.py);
elsewhere they are log lines. Imports nothing of lockstep and no TensorFlow."""

from __future__ import annotations

import dataclasses

PROGRESS_LOGGER = "lockstep.progress"


@dataclasses.dataclass(frozen=True)
class Progress:
    """One progress record: global step of total, the chunk's mean loss, the steady examples/s
    (measured after the first chunk, which traces) and the seconds left at that rate. It travels as
    a plain dict (`extra={"progress": dataclasses.asdict(p)}`, trainer_module/actions.py)."""

    step: int
    total: int
    loss: float
    examples_per_sec: float
    eta: float

    @classmethod
    def from_dict(cls, d: dict) -> "Progress":
        """Reads a record's `progress` dict back; unknown keys are an error, as everywhere here."""
        return cls(**d)
