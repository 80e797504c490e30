"""Each batched op equals torchvision's single-image tensor op with the same parameter, image by image."""

import pytest
import torch
from torchvision.transforms.v2 import functional as F

from datamodules import batch_ops

N = 8


def images(height=20, width=24, seed=0):
    """Random float images in [0, 1], with the edge cases of the colour ops: a gray image,
    an image with saturated (0 and 1) channels, and ties between the largest channels."""
    x = torch.rand(N, 3, height, width, generator=torch.Generator().manual_seed(seed))
    x[0] = 0.5
    x[1, 0], x[1, 1] = 1.0, 0.0
    x[2, 1] = x[2, 0]
    return x


def per_image(op, x, values, **kwargs):
    return torch.stack([op(x[i], float(values[i]), **kwargs) for i in range(len(x))])


@pytest.mark.parametrize(
    "batched,reference,low,high",
    [
        (batch_ops.adjust_brightness, F.adjust_brightness, 0.0, 2.0),
        (batch_ops.adjust_contrast, F.adjust_contrast, 0.0, 2.0),
        (batch_ops.adjust_saturation, F.adjust_saturation, 0.0, 2.0),
        (batch_ops.adjust_hue, F.adjust_hue, -0.5, 0.5),
    ],
    ids=["brightness", "contrast", "saturation", "hue"],
)
def test_colour_ops_match_torchvision_per_image(batched, reference, low, high):
    x = images()
    factors = low + (high - low) * torch.rand(N, generator=torch.Generator().manual_seed(1))
    factors[3] = 1.0 if low == 0.0 else 0.0  # the identity
    out = batched(x, factors)
    assert torch.allclose(out, per_image(reference, x, factors), atol=1e-5)
    assert out.min() >= 0 and out.max() <= 1


def test_one_blend_applies_a_different_colour_op_to_each_image():
    x = images()
    f = torch.full((N,), 1.3)
    zero = torch.zeros(N)
    ops = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    scale = f
    gray_weight = torch.where(ops == 2, 1 - f, zero)
    mean_weight = torch.where(ops == 1, 1 - f, zero)
    out = batch_ops.blend_colour(x, scale, gray_weight, mean_weight)
    reference = [F.adjust_brightness, F.adjust_contrast, F.adjust_saturation]
    expected = torch.stack([reference[int(ops[i])](x[i], 1.3) for i in range(N)])
    assert torch.allclose(out, expected, atol=1e-6)


def test_hue_rotation_by_a_whole_turn_and_by_zero_is_the_identity():
    x = images()
    assert torch.allclose(batch_ops.adjust_hue(x, torch.zeros(N)), x, atol=1e-5)
    half = batch_ops.adjust_hue(x, torch.full((N,), 0.5))
    assert torch.allclose(batch_ops.adjust_hue(half, torch.full((N,), -0.5)), x, atol=1e-5)
    assert not torch.allclose(half[3:], x[3:], atol=1e-2)


@pytest.mark.parametrize("size", [16, 40], ids=["downscale", "upscale"])
def test_resized_crop_matches_torchvision_antialiased_resize(size):
    x = images(20, 24)
    gen = torch.Generator().manual_seed(2)
    width = torch.randint(1, 25, (N,), generator=gen)
    height = torch.randint(1, 21, (N,), generator=gen)
    left = (torch.rand(N, generator=gen) * (24 - width + 1)).floor().long()
    top = (torch.rand(N, generator=gen) * (20 - height + 1)).floor().long()
    width[0], height[0], left[0], top[0] = 24, 20, 0, 0  # the whole image
    boxes = torch.stack((left, top, width, height), dim=1).float()
    out = batch_ops.resized_crop(x, boxes, size)
    expected = torch.stack(
        [
            F.resized_crop(x[i], int(top[i]), int(left[i]), int(height[i]), int(width[i]), [size, size], antialias=True)
            for i in range(N)
        ]
    )
    assert out.shape == (N, 3, size, size)
    assert torch.allclose(out, expected, atol=1e-5)


def test_resized_crop_takes_several_boxes_per_image():
    x = images()
    boxes = torch.tensor([[[0.0, 0.0, 24.0, 20.0]] * N, [[2.0, 3.0, 10.0, 12.0]] * N])  # [2 views, N, 4]
    out = batch_ops.resized_crop(x, boxes, 8)
    assert out.shape == (2, N, 3, 8, 8)
    assert torch.allclose(out[1], batch_ops.resized_crop(x, boxes[1], 8))
    assert torch.allclose(out[1, 4], F.resized_crop(x[4], 3, 2, 12, 10, [8, 8], antialias=True), atol=1e-5)


def test_flip_and_grayscale_only_touch_the_selected_images():
    x = images()
    chosen = torch.tensor([True, False] * (N // 2))
    flipped = batch_ops.horizontal_flip(x, chosen)
    gray = batch_ops.to_grayscale(x, chosen)
    for i in range(N):
        expected_flip = F.horizontal_flip(x[i]) if chosen[i] else x[i]
        expected_gray = F.rgb_to_grayscale(x[i], num_output_channels=3) if chosen[i] else x[i]
        assert torch.equal(flipped[i], expected_flip)
        assert torch.allclose(gray[i], expected_gray, atol=1e-6)


def test_gaussian_blur_matches_torchvision_per_sigma():
    x = images()
    sigma = 0.1 + 1.9 * torch.rand(N, generator=torch.Generator().manual_seed(3))
    out = batch_ops.gaussian_blur(x, 5, sigma)
    expected = torch.stack([F.gaussian_blur(x[i], [5, 5], [float(sigma[i])] * 2) for i in range(N)])
    assert torch.allclose(out, expected, atol=1e-5)


@pytest.mark.parametrize("size", [12, 48], ids=["downscale", "upscale"])
def test_resized_crop_matches_the_pil_path_to_8_bits(size):
    # The worker path resizes PIL images: the same antialiased bilinear filter, in 8-bit fixed point.
    pixels = (images(30, 36, seed=4) * 255).round().to(torch.uint8)
    boxes = torch.tensor([[0, 0, 36, 30], [3, 2, 29, 25], [10, 4, 20, 26], [1, 7, 33, 13]] * 2, dtype=torch.float32)
    out = batch_ops.resized_crop(pixels.float() / 255, boxes, size)
    for i, (left, top, width, height) in enumerate(boxes.int().tolist()):
        pil = F.to_pil_image(pixels[i])
        expected = F.pil_to_tensor(F.resized_crop(pil, top, left, height, width, [size, size], antialias=True)).float() / 255
        assert (out[i] - expected).abs().max() <= 1.5 / 255
