"""specwhisper: on-device Whisper on CTranslate2 with lossless speculative decoding.

    from specwhisper import WhisperEngine
    engine = WhisperEngine("base")            # a model name, a CT2 directory or a HF repo id
    result = engine.transcribe("audio.flac")  # text, tokens, language, timings, stats
"""

__version__ = "0.1.0"

from .errors import SpecWhisperError  # noqa: E402
from .transcriber import Result, TranscribeOptions, WhisperEngine  # noqa: E402

__all__ = ["Result", "SpecWhisperError", "TranscribeOptions", "WhisperEngine", "__version__"]
