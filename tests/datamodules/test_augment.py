import numpy as np
import pytest
import torch
from PIL import Image

from datamodules import ViewAugmentation
from ssl_app.errors import ConfigError


@pytest.mark.parametrize(
    "kwargs,option",
    [
        ({"crop_size": 0}, "crop_size"),
        ({"min_scale": 0.0}, "min_scale"),
        ({"min_scale": 1.5}, "min_scale"),
        ({"brightness": -0.1}, "brightness"),
        ({"saturation": -1.0}, "saturation"),
        ({"hue": 0.7}, "hue"),
        ({"jitter_prob": 1.5}, "jitter_prob"),
        ({"grayscale_prob": -0.2}, "grayscale_prob"),
        ({"hflip_prob": 2.0}, "hflip_prob"),
        ({"blur_prob": 1.1}, "blur_prob"),
        ({"mean": (0.5, 0.5)}, "mean"),
        ({"std": (0.2, 0.0, 0.2)}, "std"),
        ({"eval_crop_fraction": 0.0}, "eval_crop_fraction"),
        ({"query_policy": "randaugment"}, "query_policy"),
        ({"query_policy": "autoaugment_cifar10", "query_erasing_prob": 1.5}, "query_erasing_prob"),
    ],
)
def test_bad_values_name_the_field(kwargs, option):
    with pytest.raises(ConfigError, match=rf"augmentation\.{option} must be"):
        ViewAugmentation(**kwargs)


def picture(height=40, width=50):
    rng = np.random.default_rng(0)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.mark.parametrize("as_tensor", [False, True], ids=["pil", "uint8_tensor"])
def test_train_views_are_normalised_float_crops(as_tensor):
    image = picture()
    if as_tensor:
        image = torch.from_numpy(np.array(image)).permute(2, 0, 1).contiguous()
    torch.manual_seed(0)
    view = ViewAugmentation(crop_size=24, blur_prob=1.0).train_transform()(image)
    assert type(view) is torch.Tensor and view.shape == (3, 24, 24) and view.dtype == torch.float32
    assert view.min() < 0  # normalised, not raw [0, 1] pixels


def test_eval_transform_is_deterministic_and_only_normalises_when_sizes_match():
    augmentation = ViewAugmentation(crop_size=32)
    image = picture(32, 32)
    torch.manual_seed(0)
    a = augmentation.eval_transform()(image)
    torch.manual_seed(1)
    b = augmentation.eval_transform()(image)
    assert torch.equal(a, b)
    pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1).float() / 255
    expected = (pixels - torch.tensor(augmentation.mean)[:, None, None]) / torch.tensor(augmentation.std)[:, None, None]
    assert torch.allclose(a, expected, atol=1e-5)


def test_eval_transform_resizes_then_centre_crops():
    augmentation = ViewAugmentation(crop_size=224, eval_crop_fraction=0.875)
    resize = augmentation.eval_transform().transforms[0]
    assert resize.size == [256]
    assert augmentation.eval_transform()(picture(300, 400)).shape == (3, 224, 224)


def test_blur_kernel_is_odd_and_about_a_tenth_of_the_crop():
    assert ViewAugmentation(crop_size=224).blur_kernel_size == 23
    assert ViewAugmentation(crop_size=96).blur_kernel_size == 11
    assert ViewAugmentation(crop_size=32).blur_kernel_size == 3


def test_yaml_lists_become_tuples():
    augmentation = ViewAugmentation(mean=[0.1, 0.2, 0.3])
    assert augmentation.mean == (0.1, 0.2, 0.3)
    hash(augmentation)  # frozen and hashable, safe as a shared default


def step_names(transform) -> list[str]:
    return [type(step).__name__ for step in transform.transforms]


def test_the_query_policy_changes_the_first_view_only():
    """Catches AutoAugment/erasing applied to the key view too, or the query view left as the key's."""
    augmentation = ViewAugmentation(query_policy="autoaugment_cifar10", query_erasing_prob=0.7)
    query, key, third = augmentation.view_transforms(3)
    autoaugment = next(step for step in query.transforms if type(step).__name__ == "AutoAugment")
    assert autoaugment.policy.name == "CIFAR10"
    erasing = next(step for step in query.transforms if type(step).__name__ == "RandomErasing")
    assert erasing.p == 0.7
    assert "ColorJitter" not in str(query) and "RandomResizedCrop" not in step_names(query)
    for other in (key, third):
        assert step_names(other) == step_names(augmentation.train_transform())
    plain = ViewAugmentation().view_transforms(2)
    assert all("AutoAugment" not in step_names(t) and "RandomErasing" not in step_names(t) for t in plain)


def test_the_query_erasing_blacks_out_a_square_before_normalisation():
    """Catches the Cutout-like erasing applied after Normalize (a mean-grey square instead of a black one)
    or of another size than a quarter of the crop."""
    augmentation = ViewAugmentation(query_policy="autoaugment_cifar10", query_erasing_prob=1.0)
    torch.manual_seed(0)
    view = augmentation.query_transform()(picture(32, 32))
    assert view.shape == (3, 32, 32) and view.dtype == torch.float32
    black = torch.tensor([-m / s for m, s in zip(augmentation.mean, augmentation.std)]).view(3, 1, 1)
    erased = torch.isclose(view, black.expand_as(view), atol=1e-5).all(dim=0)
    assert int(erased.sum()) >= 16 * 16
    rows, cols = erased.nonzero(as_tuple=True)
    assert int(rows.max() - rows.min()) + 1 >= 16 and int(cols.max() - cols.min()) + 1 >= 16


def test_query_erasing_without_a_query_policy_is_refused():
    """Catches a query_erasing_prob that silently does nothing because no query pipeline is set."""
    with pytest.raises(ConfigError, match="query_erasing_prob needs a query_policy"):
        ViewAugmentation(query_erasing_prob=1.0)
