"""specwhisper: on-device Whisper on CTranslate2 with lossless speculative decoding.

    from specwhisper import WhisperEngine
    engine = WhisperEngine("base")            # a model name, a CT2 directory or a HF repo id
    result = engine.transcribe("audio.flac")  # text, tokens, language, timings, stats
"""

__version__ = "0.2.0"

from .no_telemetry import quiet_onnxruntime  # noqa: E402  (before anything loads ONNX Runtime)

quiet_onnxruntime()

# Every error a caller can cause is a SpecWhisperError; catch a kind by its class (an OptionError
# and an UnknownModelError are ValueErrors, an UnknownOptionError a TypeError, as Python's own are).
from .drafters.base import Drafter, WindowContext  # noqa: E402  (a drafter of your own: WhisperEngine(drafters=))
from .errors import (  # noqa: E402
    AudioError,
    ModelError,
    NetworkError,
    OptionError,
    OutputError,
    SpecWhisperError,
    TokenMapError,
    UnknownModelError,
    UnknownOptionError,
)
from .listen import CommandListener, CommandResult  # noqa: E402
from .live import LiveEvent, LiveStream  # noqa: E402
from .results import Result  # noqa: E402
from .transcribe_options import TranscribeOptions  # noqa: E402
from .transcriber import WhisperEngine  # noqa: E402
from .whisper_model import (  # noqa: E402  (faster-whisper's API, see whisper_model)
    BatchedInferencePipeline,
    WhisperModel,
    available_models,
    decode_audio,
    download_model,
    format_timestamp,
)

__all__ = ["AudioError", "BatchedInferencePipeline", "CommandListener", "CommandResult", "Drafter", "LiveEvent",
           "LiveStream",
           "ModelError", "NetworkError", "OptionError", "OutputError", "Result", "SpecWhisperError",
           "TokenMapError", "TranscribeOptions", "UnknownModelError", "UnknownOptionError", "WhisperEngine",
           "WhisperModel", "WindowContext", "__version__", "available_models", "decode_audio", "download_model",
           "format_timestamp"]
