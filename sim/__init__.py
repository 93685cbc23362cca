"""The simulator: replays data sets as populations of participants and measures accuracy."""
