"""Loading an engine does not import CTranslate2's converters (and through them torch and
transformers, 5.4 s a process on an AMD EPYC where both are installed, as the test extra installs
them); converting still finds them whole, whichever way they are imported first."""

from __future__ import annotations

import json
import subprocess
import sys

_CHILD = """
import json, sys
from specwhisper import WhisperEngine
if sys.argv[1]:
    engine = WhisperEngine(sys.argv[1], threads=2, selftest=False)  # the threads the suite measured
    text = engine.transcribe(sys.argv[2], language="en").text
else:  # CTranslate2 as an engine imports it, no engine (the first child loaded and used one)
    from specwhisper.ct2_import import import_ct2
    import_ct2()
    text = ""
for module in list(sys.modules.values()):  # assertWarns probes every module so: it runs none
    getattr(module, "__warningregistry__", None)
heavy = sorted(m for m in ("torch", "transformers") if m in sys.modules)
import ctranslate2
if sys.argv[3] == "submodule":  # a submodule before its package: the package still runs first
    from ctranslate2.converters.transformers import TransformersConverter
else:
    from ctranslate2.converters import TransformersConverter
from ctranslate2.specs import WhisperSpec
print(json.dumps({"heavy": heavy, "text": text,
                  "same": ctranslate2.converters.TransformersConverter is TransformersConverter,
                  "spec": WhisperSpec.__name__, "module": type(sys.modules["ctranslate2.converters"]).__name__}))
"""


def test_engine_loads_without_the_converters_and_converting_still_finds_them(tiny_model_dir, shared_data):
    clip = str(shared_data / "real/audio/jfk.flac")
    for first, model in (("package", str(tiny_model_dir)), ("submodule", "")):
        proc = subprocess.run([sys.executable, "-c", _CHILD, model, clip, first],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        assert report["heavy"] == [], f"{'loading an engine' if model else 'importing CTranslate2'} imported {report['heavy']}"
        assert "country" in report["text"] or not model
        assert report["same"] and report["spec"] == "WhisperSpec" and report["module"] == "module", report


_FAILING_CHILD = """
import sys
for name in ("torch", "transformers", "yaml"):  # not installed, as far as this process can tell
    sys.modules[name] = None
from specwhisper.ct2_import import import_ct2
ct2 = import_ct2()
said = []
for attempt in range(2):
    try:
        ct2.converters.TransformersConverter
    except ImportError as exc:
        said.append(exc.name)
del sys.modules["yaml"]  # installed after all: the next read runs the package whole
from ctranslate2.converters import TransformersConverter
print(said, ct2.converters.TransformersConverter is TransformersConverter)
"""


def test_converters_that_fail_to_import_say_why_each_time_and_run_once_they_can():
    proc = subprocess.run([sys.executable, "-c", _FAILING_CHILD], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["['yaml',", "'yaml']", "True"], proc.stdout
