"""specwhisper: on-device Whisper on CTranslate2 with lossless speculative decoding."""

__version__ = "0.1.0"
