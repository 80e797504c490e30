"""EmbeddingProjector: what TensorBoard's projector plugin reads points at existing files, the tensor
has the subset's shape, and each row's label and embedding are those of the sample it names."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from google.protobuf import text_format
from tensorboard.plugins.projector import projector_plugin
from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

from callbacks import EmbeddingProjector
from ssl_app.errors import ConfigError
from ssl_app.projector import projector_subset
from tests.callbacks.helpers import embed_views, tensorboard, tiny_data, tiny_model, tiny_trainer
from tests.sprites import assert_tiles_show, expected_tiles, projector_entry, sprite_tiles

SUBSET = 12


def test_the_projector_config_points_at_the_subsets_tensor_labels_and_sprite(tmp_path):
    logger = tensorboard(tmp_path)
    data, model = tiny_data(), tiny_model()
    projector = EmbeddingProjector(max_samples=SUBSET, seed=3, thumbnail_size=8)
    tiny_trainer([projector], logger=logger, max_epochs=1).fit(model, data)
    log_dir = Path(logger.log_dir)
    config = text_format.Parse((log_dir / "projector_config.pbtxt").read_text(), ProjectorConfig())
    [embedding] = config.embeddings
    assert embedding.tensor_name == "projector_val:00002"
    tensor_path, metadata_path = (log_dir / embedding.tensor_path, log_dir / embedding.metadata_path)
    assert tensor_path.is_file() and metadata_path.is_file() and (log_dir / embedding.sprite.image_path).is_file()
    assert list(embedding.sprite.single_image_dim) == [8, 8]
    tensor = projector_plugin._read_tensor_tsv_file(str(tensor_path))  # TensorBoard's own reader
    assert tensor.shape == (SUBSET, 16)
    header, *rows = [line.split("\t") for line in metadata_path.read_text().splitlines()]
    assert header == ["label", "index"] and len(rows) == SUBSET
    chosen = projector_subset(len(data.dataset("val")), SUBSET, seed=3)
    assert [int(index) for _, index in rows] == chosen.tolist()
    assert [int(label) for label, _ in rows] == [data.dataset("val")[int(i)][1] for i in chosen]
    _, _, clean, _ = embed_views(model, data.embedding_dataloader("val", views=1, augment=False))
    assert np.allclose(tensor, clean[chosen].numpy(), atol=1e-5)  # row i is the sample its index names


@pytest.mark.parametrize("eval_on", ["device", "workers"])
def test_tile_i_of_the_sprite_is_the_image_of_row_i(tmp_path, eval_on):
    """Catches thumbnails out of step with the rows (another image, order or subset), the normalisation
    left in (a stretched or dark image), or an image cropped rather than resized: each tile of the
    sprite, cut as TensorBoard cuts it, against its row's eval-transform image resized to 8 px; the
    cells after the last tile are black. Both ways the images are read (kept on the device, workers)."""
    logger = tensorboard(tmp_path)
    data, model = tiny_data(eval_on=eval_on), tiny_model()
    tiny_trainer([EmbeddingProjector(max_samples=SUBSET, seed=3, thumbnail_size=8)], logger=logger, max_epochs=1).fit(model, data)
    log_dir = Path(logger.log_dir)
    entry = projector_entry(log_dir)
    tiles, rest = sprite_tiles(log_dir, entry)
    indices = [int(line.split("\t")[1]) for line in (log_dir / entry.metadata_path).read_text().splitlines()[1:]]
    assert indices == projector_subset(len(data.dataset("val")), SUBSET, seed=3).tolist()
    transform = data.augmentation.eval_transform()
    images = torch.stack([transform(data.dataset("val")[index][0]) for index in indices])
    assert images.shape[-1] == 32  # the crop: resized to 8, not shown as it is
    assert_tiles_show(tiles, expected_tiles(images, 8, data.augmentation.mean, data.augmentation.std))
    assert len(rest) == 4 and not rest.any()  # 12 tiles in a 4 × 4 grid


def test_the_subset_is_fixed_and_bounded_and_bad_options_are_one_error():
    assert torch.equal(projector_subset(100, 10, 0), projector_subset(100, 10, 0))
    assert not torch.equal(projector_subset(100, 10, 0), projector_subset(100, 10, 1))
    assert projector_subset(5, 10, 0).tolist() == [0, 1, 2, 3, 4]
    for options, option in (({"max_samples": 0}, "max_samples"), ({"thumbnail_size": 2}, "thumbnail_size")):
        with pytest.raises(ConfigError, match=f"EmbeddingProjector: {option}"):
            EmbeddingProjector(**options)
    with pytest.raises(ConfigError, match="sprite wider"):
        EmbeddingProjector(max_samples=10_000, thumbnail_size=128)
