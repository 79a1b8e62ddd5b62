"""Names for JSON that has no fixed shape, shared by every package above core.

``Json`` is a JSON value as ``json.loads`` returns it; ``JsonObject`` a JSON object of
such values. Use them only where the data is genuinely free-form: a user's ``options:``
block passed through to a backend, a document as parsed before it is validated, keys a
reader does not know and passes through. Data with a known shape gets a real type
instead: a frozen record in guard.results, a frozen dataclass in the package of its
concern, or a ``TypedDict`` for JSON a writer builds with fixed keys.
"""

from __future__ import annotations

from typing import Any, TypeAlias

Json: TypeAlias = Any  # a JSON value as json.loads returns it (as guard.results.record's)
JsonObject: TypeAlias = dict[str, Json]  # a JSON object with no fixed keys
