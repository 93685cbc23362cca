"""The simulator: replays data sets as populations of participants and measures accuracy."""

from participant.extras import require_extra

require_extra("sim", "sim", ["scipy", "sklearn", "matplotlib", "tqdm", "pandas"])
