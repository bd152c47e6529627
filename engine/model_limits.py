"""Whisper's fixed sizes that decoding and its measurements share."""

MAX_POSITIONS = 448  # Whisper decoder positions (prompt + generated)
FULL_ENCODER_FRAMES = 1500  # encoder outputs of a full 30 s window
