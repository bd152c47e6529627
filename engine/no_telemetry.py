"""An on-device engine sends nothing anywhere: two of its libraries report usage by default.

* ONNX Runtime (1.32 on Linux) starts a telemetry uploader when it loads: it writes a device id and
  an event cache under ``~/.cache/Microsoft/DeveloperTools/.onnxruntime`` and, where HOME is read-
  only, prints a coloured warning from C++ that no Python filter can hold. Its switch is the
  environment variable ``ORT_DISABLE_TELEMETRY=1``, read once, before it initialises: set here
  when specwhisper is imported, unless the application set it (either way) itself.
* ``import openvino`` imports its model converter (``openvino.tools.ovc``), which sends an "import"
  event to Google Analytics (a DNS lookup from a worker thread that stays for the life of the
  process), writes ``~/intel/openvino_ga_cid`` and ``~/intel/stats``, and where HOME is read-only
  logs warnings through the root logger, which installs a handler there and makes the
  application's own ``logging.basicConfig`` a no-op. The engine never converts a model with it
  (its graphs are built with ``onnx`` and read by ``Core``), so it imports openvino without the
  converter (openvino's ``__init__`` passes over a converter that cannot be imported);
  ``openvino.convert_model`` is still there for an application that asks for it, imported then.

Where the application imported either library before specwhisper, it was loaded as the
application had it, and nothing here changes that.
"""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType

ORT_SWITCH = "ORT_DISABLE_TELEMETRY"
CONVERTER = "openvino.tools.ovc"


def quiet_onnxruntime() -> None:
    """Turn ONNX Runtime's telemetry off for this process, unless the application decided."""
    os.environ.setdefault(ORT_SWITCH, "1")


def import_openvino() -> ModuleType:
    """``import openvino`` without its converter's telemetry (see the module docstring); raises
    ImportError where openvino is not installed."""
    if "openvino" in sys.modules:  # loaded by the application (or blocked by it: None, an ImportError)
        return importlib.import_module("openvino")
    blocked = CONVERTER not in sys.modules
    if blocked:
        sys.modules[CONVERTER] = None  # an import of it raises ImportError, which openvino passes over
    try:
        import openvino
    finally:
        if blocked and sys.modules.get(CONVERTER, 0) is None:
            del sys.modules[CONVERTER]
    if "convert_model" not in vars(openvino) and "__getattr__" not in vars(openvino):
        openvino.__getattr__ = _converter_on_demand
    return openvino


def _converter_on_demand(name: str):
    """``openvino.convert_model`` for an application that uses it: imported when asked for (its
    telemetry is then the application's choice)."""
    if name == "convert_model":
        from openvino.tools.ovc import convert_model

        return convert_model
    raise AttributeError(f"module 'openvino' has no attribute {name!r}")
