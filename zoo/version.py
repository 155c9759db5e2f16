"""zoo's version, on the ground floor: checkpoints record it (:mod:`zoo.io.checkpoint`), built-in plugins
report it (:mod:`zoo.registry`), and the package exports it as ``zoo.__version__``."""
__version__ = "0.1.0"
