import pytest
import torch

from datamodules import SyntheticDataModule
from datamodules.synthetic import make_shapes
from ssl_app.errors import ConfigError


def test_same_seed_same_images_other_seed_other_images():
    a, la = make_shapes(200, 10, 32, seed=3)
    b, lb = make_shapes(200, 10, 32, seed=3)
    c, _ = make_shapes(200, 10, 32, seed=4)
    assert a.dtype == torch.uint8 and a.shape == (200, 3, 32, 32)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert not torch.equal(a, c)


def test_classes_are_balanced():
    _, labels = make_shapes(1000, 10, 32, seed=0)
    counts = torch.bincount(labels, minlength=10)
    assert counts.min() >= 80, counts


def nearest_mean_accuracy(train_x, train_y, test_x, test_y, classes):
    means = torch.stack([train_x[train_y == c].mean(0) for c in range(classes)])
    predicted = torch.cdist(test_x, means).argmin(1)
    return (predicted == test_y).float().mean().item()


def test_class_lives_in_the_shape_not_the_colour():
    """Shape (foreground mask) separates the classes; mean colour does not."""
    train, train_y = make_shapes(2000, 10, 32, seed=0)
    test, test_y = make_shapes(500, 10, 32, seed=1)

    def colour(images):
        return images.float().mean(dim=(2, 3))

    def shape_signature(images):
        # Foreground = pixels far from the border colour; a centred, scale-free radial profile.
        x = images.float()
        border = torch.cat([x[:, :, 0, :], x[:, :, -1, :], x[:, :, :, 0], x[:, :, :, -1]], dim=2).median(dim=2).values
        mask = ((x - border[:, :, None, None]).abs().sum(1) > 60).float()
        ys, xs = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
        area = mask.sum((1, 2)).clamp_min(1)
        cy = (mask * ys).sum((1, 2)) / area
        cx = (mask * xs).sum((1, 2)) / area
        dy, dx = ys - cy[:, None, None], xs - cx[:, None, None]
        radius = (dy**2 + dx**2).sqrt()
        scale = ((mask * radius).sum((1, 2)) / area).clamp_min(1e-3)
        r = radius / scale[:, None, None]
        bins = torch.linspace(0, 2.5, 11)
        hist = torch.stack([(mask * ((r >= lo) & (r < hi))).sum((1, 2)) for lo, hi in zip(bins[:-1], bins[1:])], 1)
        fill = area / (scale**2)
        return torch.cat([hist / area[:, None], fill[:, None] / 10], 1)

    colour_acc = nearest_mean_accuracy(colour(train), train_y, colour(test), test_y, 10)
    shape_acc = nearest_mean_accuracy(shape_signature(train), train_y, shape_signature(test), test_y, 10)
    assert colour_acc < 0.2, colour_acc  # chance is 0.1
    assert shape_acc > 0.5, shape_acc  # 0.65 with these seeds; chance is 0.1


@pytest.mark.parametrize(
    "kwargs,option", [({"num_classes": 11}, "num_classes"), ({"train_size": 0}, "train_size"), ({"image_size": 4}, "image_size")]
)
def test_bad_options_are_named(kwargs, option):
    with pytest.raises(ConfigError, match=option):
        SyntheticDataModule(**kwargs)


def test_num_samples_before_fit():
    dm = SyntheticDataModule(train_size=64, val_size=10, test_size=12)
    assert dm.num_samples("train") == 64 and dm.num_samples("test") == 12 and dm.num_classes == 10
