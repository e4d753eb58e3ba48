"""A str whose __len__ lies, for sizing tests: requests must be sized by the real UTF-8 bytes."""


class LyingName(str):
    """A topic name whose __len__ says it is huge (or nothing)."""

    claim = 0

    def __len__(self) -> int:
        return self.claim
