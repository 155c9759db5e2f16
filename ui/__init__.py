"""The Gradio UI, installed as ``zoo.ui``; see ``zoo.ui.app``."""
