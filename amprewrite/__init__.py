"""amprewrite: turn FP32 PyTorch training scripts into mixed-precision ones by rewriting source."""

__version__ = "0.1.0"
