"""Preset specs (*.yaml) and trained checkpoints (<name>/model.safetensors + model card), installed as ``zoo.checkpoints``."""
