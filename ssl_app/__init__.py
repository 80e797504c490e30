"""ssl_app: contrastive self-supervised learning, and a view of what the loss does to the embedding space."""

__version__ = "0.1.0"
