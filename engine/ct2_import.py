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
import threading
import types

_DEFERRED = ("specs", "converters")  # pure-Python subpackages the runtime never reads


class _Deferred(types.ModuleType):
    """A package whose code runs the first time a name it lacks is read (or one of its submodules
    is imported: ``_RunsPackageFirst``). ``__spec__`` and ``__path__`` are there from the start:
    the import system reads them for any module it finds in ``sys.modules``, and the standard
    library's ``LazyLoader``, which runs a module on any read, ran these at once. Other dunder
    probes (``__warningregistry__``, searched for in every module by ``assertWarns``) run nothing.
    Another thread reading a name it lacks while it runs waits for the run; a run that fails leaves
    no half-run module behind (the next read runs it again, and says the same error)."""

    def _pending(self) -> bool:
        return "_deferred_loader" in self.__dict__

    def _run(self) -> None:
        with self.__dict__["_deferred_lock"]:
            loader = self.__dict__.pop("_deferred_loader", None)
            if loader is None:  # ran, or running in this thread (its own code reading itself)
                return
            before = dict(self.__dict__)
            try:
                loader.exec_module(self)
            except BaseException:
                self.__dict__.clear()  # deferred again, as it was: the next read says the same error
                self.__dict__.update(before, _deferred_loader=loader)
                raise
            self.__class__ = types.ModuleType

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__") and name != "__all__":
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        self._run()
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}") from None


class _AfterPackage(importlib.abc.Loader):
    """A submodule of a deferred package: the package runs first, as a plain import would have run
    it, and the submodule its code imported is handed over as it is (no second copy of its classes
    and registries); one it did not import is imported as usual. The package runs here, not in
    the finder: the import system calls finders holding its global lock."""

    def __init__(self, package: _Deferred) -> None:
        self._package = package
        self._spec = None

    def create_module(self, spec):
        _Deferred._run(self._package)  # by the class: another thread may have run it meanwhile
        module = sys.modules.get(spec.name) or importlib.import_module(spec.name)
        self._spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        module.__spec__ = self._spec  # the import system set this loader's spec on it


class _RunsPackageFirst(importlib.abc.MetaPathFinder):
    """Finds the submodules of a package still deferred (``_AfterPackage``); inert otherwise."""

    def find_spec(self, name, path=None, target=None):
        package = sys.modules.get(name.rpartition(".")[0])
        if not (isinstance(package, _Deferred) and package._pending()):
            return None
        return importlib.util.spec_from_loader(name, _AfterPackage(package))


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
        module._deferred_lock = threading.RLock()
        sys.modules[full] = module
    if not any(isinstance(finder, _RunsPackageFirst) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RunsPackageFirst())


def import_ct2():
    """The ``ctranslate2`` module, its converters deferred (see the module's docstring)."""
    _defer_subpackages()
    import ctranslate2

    return ctranslate2
