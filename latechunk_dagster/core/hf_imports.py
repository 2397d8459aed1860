"""transformers' auto classes, imported without the scikit-learn and SciPy imports neither engine uses.

Every transformers model class imports ``GenerationMixin``, and ``AutoTokenizer`` imports it too
(``models/auto/auto_factory.py``); its module ``generation/candidate_generator.py`` runs
``from sklearn.metrics import roc_curve`` at import whenever scikit-learn is installed, for assisted
decoding's confidence threshold, which an encoder never runs. Likewise ``modeling_utils`` imports
the object-detection losses, which run ``from scipy.optimize import linear_sum_assignment`` when
SciPy is installed. Both are installed here by sentence-transformers (the ``dev`` extra). Importing
``sklearn.metrics`` measured ~0.8 s of CPU on the 2-core machine and ``scipy.optimize`` ~0.25 s:
the largest imports on ``latechunk search``'s path that the light engine does not use
(``bench/query_engine.py`` reports the search's import share).

So this module imports transformers while those two modules are stand-ins whose functions import
the real module on their first call (:func:`deferred_functions`); a stand-in leaves ``sys.modules``
when the import is done, so any later ``import sklearn.metrics`` is the real one. Where a package is
not installed, or the module is already imported, nothing is deferred.

Import from here, not from transformers, where the package needs these names:
``from latechunk_dagster.core.hf_imports import AutoTokenizer``. The import is inside the
functions that need it, so ``import latechunk_dagster`` still imports no transformers.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class _DeferredModule(types.ModuleType):
    """Stands in for a module during another module's import: each name taken from it is a
    function that imports the real module on its first call and calls the real function."""

    def __getattr__(self, attr: str) -> Callable[..., Any]:
        if attr.startswith("__"):
            raise AttributeError(attr)
        module = self.__name__

        def deferred(*args: Any, **kwargs: Any) -> Any:
            return getattr(importlib.import_module(module), attr)(*args, **kwargs)

        deferred.__name__ = deferred.__qualname__ = attr
        deferred.__doc__ = f"{module}.{attr}, imported on its first call"
        return deferred


@contextmanager
def deferred_functions(module: str) -> Iterator[None]:
    """While the block runs, ``from MODULE import f`` binds ``f`` to a function that imports
    ``MODULE`` on its first call (functions only: a class taken from the stand-in would be a
    function). Nothing is deferred where ``MODULE`` is already imported or its top-level package
    is not installed. The stand-in is removed from ``sys.modules`` when the block ends."""
    if module in sys.modules or importlib.util.find_spec(module.partition(".")[0]) is None:
        yield
        return
    stand_in = _DeferredModule(module)
    sys.modules[module] = stand_in
    try:
        yield
    finally:
        if sys.modules.get(module) is stand_in:
            del sys.modules[module]


with deferred_functions("sklearn.metrics"), deferred_functions("scipy.optimize"):
    import transformers
    import transformers.modeling_utils  # imports the losses, whose scipy.optimize import is deferred
    from transformers import AutoModel, AutoTokenizer

__all__ = ["AutoModel", "AutoTokenizer", "deferred_functions", "transformers"]
