"""A user-facing error line reads as sentences: the message ends before the hint starts."""

from __future__ import annotations

from guard.core.errors import GuardError, UsageError


def test_message_and_hint_are_two_sentences():
    e = UsageError("input 'x' is dynamic and unbound", where="s.yaml: models[0]",
                   hint="Bind it under inputs: x: {shape: [1, 3]}.")  # fmt: skip
    assert str(e) == (
        "s.yaml: models[0]: input 'x' is dynamic and unbound. Bind it under inputs: "
        "x: {shape: [1, 3]}."
    )
    assert str(UsageError("done.", hint="Next.")) == "done. Next."
    assert str(UsageError("why:", hint="this")) == "why: this"
    assert str(GuardError("no hint")) == "no hint"
    assert "\n" not in str(UsageError("two\nlines", hint="fix"))
