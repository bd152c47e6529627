"""Importing CTranslate2 without its converters.

Why: ``import ctranslate2`` runs ``ctranslate2/__init__.py``, which imports the package's Python
converters and model specs, and those import torch and transformers wherever they are installed
(any environment that converts models, and this project's test extra). On an AMD EPYC (2 cores,
2026-11-30) that made every first engine load in a process 5.4 s slower (torch 3.5 s,
transformers 1.8 s): `specwhisper transcribe jfk.flac --model tiny.en` took 6.8 s. Decoding
never uses them (only the compiled extension), so both subpackages are registered as lazy
modules before the package is first imported: they load, whole and unchanged, the first time
anything reads from them (``specwhisper convert`` through CTranslate2's TransformersConverter).
Nothing of CTranslate2 is patched; where it was imported before us, it is used as it is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

_DEFERRED = ("specs", "converters")  # pure-Python subpackages the runtime never reads


class _Deferred(types.ModuleType):
    """A package whose code runs the first time an attribute it lacks is read (or one of its
    submodules is imported: ``_RunsDeferredFirst``). ``__spec__`` and ``__path__`` are there from
    the start: the import system reads them for any module it finds in ``sys.modules``, and the
    standard library's ``LazyLoader``, which runs a module on any read, ran these at once."""

    def _run(self) -> None:
        loader = self.__dict__.pop("_deferred_loader", None)
        if loader is not None:
            self.__class__ = types.ModuleType
            loader.exec_module(self)

    def __getattr__(self, name: str):
        if "_deferred_loader" not in self.__dict__:  # running or ran: a name it lacks is missing
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        self._run()
        return getattr(self, name)


class _AlreadyImported(importlib.abc.Loader):
    """The module a deferred package's own code imported while it ran: the same object, so that no
    second copy of it (of its classes, of its registries) is made."""

    def __init__(self, spec) -> None:
        self._spec = spec

    def create_module(self, spec):
        return sys.modules[spec.name]

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec  # the import system set this loader's spec on it


class _RunsDeferredFirst(importlib.abc.MetaPathFinder):
    """A submodule of a deferred package imported first (``from ctranslate2.converters.transformers
    import ...``): the package runs first, as a plain import would have run it; its code imports
    the submodule, which is then handed over as it is."""

    def find_spec(self, name, path=None, target=None):
        package = sys.modules.get(name.rpartition(".")[0])
        if not isinstance(package, _Deferred):
            return None
        package._run()
        module = sys.modules.get(name)
        if module is None:
            return None
        # The import system, finding the module imported meanwhile, would load it again from its
        # own spec (a second copy) unless that spec is None; ``_AlreadyImported`` puts it back.
        loader = _AlreadyImported(module.__spec__)
        module.__spec__ = None
        return importlib.util.spec_from_loader(name, loader)


def _defer_subpackages() -> None:
    """Register CTranslate2's ``_DEFERRED`` subpackages as deferred modules (no-op where the package
    is imported already, or where its layout is not the one expected: then it imports as usual)."""
    if "ctranslate2" in sys.modules:
        return
    package = importlib.util.find_spec("ctranslate2")  # a top-level spec: nothing is executed
    if package is None or not package.submodule_search_locations:
        return
    for name in _DEFERRED:
        full = f"ctranslate2.{name}"
        spec = importlib.machinery.PathFinder.find_spec(full, list(package.submodule_search_locations))
        if spec is None or spec.loader is None or full in sys.modules:
            continue
        module = importlib.util.module_from_spec(spec)
        module.__class__ = _Deferred
        module._deferred_loader = spec.loader
        sys.modules[full] = module
    if not any(isinstance(finder, _RunsDeferredFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RunsDeferredFirst())


def import_ct2():
    """The ``ctranslate2`` module, its converters deferred (see the module's docstring)."""
    _defer_subpackages()
    import ctranslate2

    return ctranslate2
