"""gpudiag: bring up and diagnose GPU server nodes."""

import sys
import types

__version__ = "0.1.0"


class _OnFirstUse(types.ModuleType):
    """A standard module's stand-in in sys.modules until one of its names is used: then
    the module is imported and the stand-in takes its names. `dataclasses` imports `copy`
    (for asdict's deepcopy) and `inspect` (for the signature of a class without a
    docstring; for every class's annotations from Python 3.12), about 7 ms of a `gpudiag
    check` process that, before 3.12, uses neither (issue 44). Unlike importlib's
    LazyLoader, an `import copy` elsewhere does not load it: the stand-in has a __spec__
    of its own. Put in place here, where every gpudiag module's import begins, so that
    it comes before any of them imports dataclasses."""

    def __getattr__(self, name: str) -> object:
        import importlib

        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)
        return getattr(module, name)


def _on_first_use(*names: str) -> None:
    """Stand-ins (_OnFirstUse) for the modules named that are not imported yet."""
    spec_type = type(__spec__)  # importlib's ModuleSpec, without importing importlib
    for name in names:
        if name not in sys.modules:
            stand_in = _OnFirstUse(name)
            stand_in.__spec__ = spec_type(name, None)
            sys.modules[name] = stand_in


if "dataclasses" not in sys.modules and __spec__ is not None:
    _on_first_use("copy", "inspect")
