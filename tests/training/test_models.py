"""CIFAR ResNets: the published parameter counts, output shapes, and that they can learn."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from provisioning.core.errors import InputError
from training.node.models import build_model

# Parameter counts of the CIFAR variants (3x3 stem, no max-pool, 10 classes) as commonly reported.
KNOWN = {"resnet18": 11_173_962, "resnet34": 21_282_122, "resnet50": 23_520_842}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_parameter_count(name):
    model = build_model(name, 10)
    assert sum(p.numel() for p in model.parameters()) == KNOWN[name]


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_output_shape(name):
    model = build_model(name, 7).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_other_image_sizes_pool_to_the_same_head():
    model = build_model("resnet18", 10).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 48, 40)).shape == (1, 10)


def test_few_steps_reduce_loss_on_a_tiny_batch():
    torch.manual_seed(0)
    model = build_model("resnet18", 10)
    x, y = torch.randn(8, 3, 16, 16), torch.arange(8) % 10  # small images keep this test quick
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_same_seed_same_weights():
    torch.manual_seed(5)
    a = build_model("resnet18").state_dict()
    torch.manual_seed(5)
    b = build_model("resnet18").state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_unknown_name_is_input_error():
    with pytest.raises(InputError, match="unknown model 'resnet99'"):
        build_model("resnet99")


def test_width_sets_the_first_stage_and_parameters_grow_with_its_square():
    narrow, paper = build_model("resnet18", 10, width=16), build_model("resnet18", 10)
    assert narrow.stem[0].out_channels == 16 and narrow.fc.in_features == 8 * 16
    count = [sum(p.numel() for p in m.parameters()) for m in (narrow, paper)]
    assert count[1] == 11_173_962 and 14 < count[1] / count[0] < 17
    assert narrow(torch.randn(2, 3, 16, 16)).shape == (2, 10)
