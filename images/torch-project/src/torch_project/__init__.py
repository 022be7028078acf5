"""A small PyTorch training project (the example of images/torch-project/envbuild.toml)."""

__version__ = "0.1.0"
